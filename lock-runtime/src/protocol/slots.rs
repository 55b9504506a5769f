//! Which fencing token counter a lock uses: one per Redis Cluster slot (and key prefix), named so
//! that it lives in the lock's own slot, where the acquire's transaction or script can reach it.
//! On one server (or Sentinel) that is at most 16,384 small keys per prefix, never expiring.

use std::sync::LazyLock;

/// How many hash slots Redis Cluster has.
const SLOTS: usize = 16_384;

/// The slot of a Redis key, by the rule Redis Cluster uses: the CRC16 of the hash tag (the text
/// between the first `{` and the next `}`, if that is not empty), or of the whole key.
pub(crate) fn slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let hashed = bytes
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &bytes[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(bytes);
    crc16::State::<crc16::XMODEM>::calculate(hashed) % SLOTS as u16
}

/// A number whose decimal text, as a hash tag, puts a key in `slot` (the smallest such).
pub(crate) fn tag_in(slot: u16) -> u32 {
    TAGS[usize::from(slot) % SLOTS]
}

/// For each slot, a number whose decimal text, as a hash tag, falls in that slot: found once,
/// the smallest such number for each slot (about 170,000 CRCs, a few milliseconds).
static TAGS: LazyLock<Box<[u32]>> = LazyLock::new(|| {
    let mut tags = vec![u32::MAX; SLOTS];
    let mut missing = SLOTS;
    let mut n: u32 = 0;
    while missing > 0 {
        let text = n.to_string();
        let slot = usize::from(crc16::State::<crc16::XMODEM>::calculate(text.as_bytes())) % SLOTS;
        if tags[slot] == u32::MAX {
            tags[slot] = n;
            missing -= 1;
        }
        n += 1;
    }
    tags.into_boxed_slice()
});

/// Builds the slot table now rather than on the first acquire.
pub(crate) fn prepare() {
    LazyLock::force(&TAGS);
}

/// The fence counter of the lock stored as `lock` under `prefix`: `<prefix>fence:{<tag>}`, the
/// tag chosen so that the counter shares the lock's slot. A prefix with braces of its own can
/// put the two in different slots; such a lock keeps its counter beside it, as `<lock>:fence`.
pub(crate) fn counter(prefix: &str, lock: &str) -> String {
    use std::fmt::Write as _;
    let wanted = slot(lock);
    let mut name = String::with_capacity(prefix.len() + 18);
    name.push_str(prefix);
    // Writing to a String cannot fail.
    let _ = write!(name, "fence:{{{}}}", TAGS[usize::from(wanted)]);
    // Without a `{` in the prefix, the tag is the name's hash tag, in `wanted` by the table's
    // making: only a prefix with a brace needs the name hashed again (a CRC per acquire).
    if !prefix.contains('{') || slot(&name) == wanted {
        name
    } else {
        format!("{lock}:fence")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_the_hash_tag_rule() {
        // Values Redis's CLUSTER KEYSLOT gives.
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("{user1000}.following"), slot("{user1000}.followers"));
        assert_eq!(slot("foo{}{bar}"), slot("foo{}{bar}"));
        assert_ne!(slot("foo{}{bar}"), slot("bar"));
        assert_eq!(slot("foo{{bar}}zap"), slot("{bar"));
        assert_eq!(slot("foo{bar}{zap}"), slot("bar"));
    }

    #[test]
    fn every_lock_gets_a_counter_in_its_own_slot() {
        for key in ["lock:{order:42}", "lock:{a}", "lock:{\\}x}", "x:{y}:sem"] {
            let counter = counter("lock:", key);
            assert_eq!(slot(&counter), slot(key), "{counter} for {key}");
            assert!(counter.starts_with("lock:fence:{"), "{counter}");
        }
        // Every slot has a tag, and its name falls in that slot.
        for (wanted, &tag) in TAGS.iter().enumerate() {
            assert_eq!(usize::from(slot(&format!("x:fence:{{{tag}}}"))), wanted);
        }
        assert!(TAGS.iter().all(|&tag| tag != u32::MAX));
        // A prefix with a hash tag of its own puts every key in its slot: so is the counter.
        assert_eq!(
            counter("app{x}:", "app{x}:{k}"),
            "app{x}:fence:{".to_owned() + &TAGS[usize::from(slot("x"))].to_string() + "}"
        );
        // A prefix with an open brace alone would split them: the counter stays beside the lock.
        assert_eq!(counter("a{b:", "a{b:{k}"), "a{b:{k}:fence");
    }
}
