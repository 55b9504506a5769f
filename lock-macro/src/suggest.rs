//! "did you mean" suggestions for misspelled placeholder and option names.

/// The candidate closest to `typo`, if it is close enough to be what the user meant: at most a
/// third of the typo's length in edits (at least one), or the same word in another case.
pub(crate) fn closest<'a>(
    typo: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let budget = (typo.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .filter(|candidate| *candidate != typo)
        .map(|candidate| {
            let distance = if candidate.eq_ignore_ascii_case(typo) {
                0
            } else {
                edit_distance(typo, candidate)
            };
            (distance, candidate)
        })
        .filter(|(distance, _)| *distance <= budget)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

/// `leaseTime` -> `lease_time`, `TTL` -> `ttl`; snake_case names are returned as they are.
pub(crate) fn snake_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    let mut previous_lower = false;
    for c in name.chars() {
        if c.is_uppercase() {
            if previous_lower {
                out.push('_');
            }
            out.extend(c.to_lowercase());
            previous_lower = false;
        } else {
            out.push(c);
            previous_lower = c.is_lowercase() || c.is_ascii_digit();
        }
    }
    out
}

/// Levenshtein distance over chars, counting a swap of two neighbours as one edit
/// (`uesr` -> `user`), since that is the most common typo.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // Three rows of the classic matrix: the one before the previous, the previous, the current.
    let mut before: Vec<usize> = vec![0; b.len() + 1];
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current: Vec<usize> = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        current[0] = i;
        for j in 1..=b.len() {
            let substitution = previous[j - 1] + usize::from(a[i - 1] != b[j - 1]);
            let mut best = substitution.min(previous[j] + 1).min(current[j - 1] + 1);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(before[j - 2] + 1);
            }
            current[j] = best;
        }
        std::mem::swap(&mut before, &mut previous);
        std::mem::swap(&mut previous, &mut current);
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distance_counts_insertions_deletions_and_substitutions() {
        assert_eq!(edit_distance("", ""), 0);
        assert_eq!(edit_distance("abc", ""), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("user_id", "user_id"), 0);
        assert_eq!(edit_distance("usr_id", "user_id"), 1);
        assert_eq!(edit_distance("user_idd", "user_id"), 1);
        assert_eq!(edit_distance("user_ix", "user_id"), 1);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn a_swap_of_neighbours_is_one_edit() {
        assert_eq!(edit_distance("uesr", "user"), 1);
        assert_eq!(edit_distance("tll", "ttl"), 1);
    }

    #[test]
    fn closest_picks_the_nearest_candidate() {
        let params = ["user_id", "voucher_id", "amount"];
        assert_eq!(closest("usr_id", params), Some("user_id"));
        assert_eq!(closest("vocher_id", params), Some("voucher_id"));
        assert_eq!(closest("amuont", params), Some("amount"));
    }

    #[test]
    fn closest_ignores_distant_candidates() {
        assert_eq!(closest("tenant", ["user_id", "amount"]), None);
        assert_eq!(closest("x", ["abc"]), None);
        assert_eq!(closest("id", Vec::<&str>::new()), None);
    }

    #[test]
    fn closest_matches_a_different_case() {
        assert_eq!(closest("UserId", ["userid", "x"]), Some("userid"));
    }

    #[test]
    fn closest_never_suggests_the_typo_itself() {
        assert_eq!(closest("id", ["id"]), None);
    }

    #[test]
    fn camel_case_becomes_snake_case() {
        assert_eq!(snake_case("leaseTime"), "lease_time");
        assert_eq!(snake_case("acquireTimeout"), "acquire_timeout");
        assert_eq!(snake_case("allowLongTtl"), "allow_long_ttl");
        assert_eq!(snake_case("TTL"), "ttl");
        assert_eq!(snake_case("max_hold"), "max_hold");
    }

    #[test]
    fn short_names_allow_one_edit() {
        assert_eq!(closest("ib", ["id"]), Some("id"));
        assert_eq!(closest("ab", ["id"]), None);
    }
}
