use lock_runtime::{LockError, LockManager, distributed_lock};

struct Document<'a> {
    title: &'a str,
    body: &'a str,
}

// Named and elided lifetimes, and a result that borrows from a parameter.
#[distributed_lock(key = "doc:<doc.title>", manager = locks)]
async fn first_line<'a, 'm>(
    locks: &'m LockManager,
    doc: &Document<'a>,
) -> Result<&'a str, LockError> {
    Ok(doc.body.lines().next().unwrap_or_default())
}

#[distributed_lock(key = "word:<word>", manager = locks)]
async fn shout(locks: &LockManager, word: &str) -> Result<String, LockError> {
    Ok(word.to_uppercase())
}

struct Editor<'a> {
    locks: &'a LockManager,
    name: &'a str,
}

impl<'a> Editor<'a> {
    #[distributed_lock(key = "editor:<self.name>", manager = self.locks)]
    async fn name(&self) -> Result<&'a str, LockError> {
        Ok(self.name)
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let locks = LockManager::memory();
    let doc = Document {
        title: "notes",
        body: "first\nsecond",
    };
    assert_eq!(first_line(&locks, &doc).await.expect("locked call"), "first");
    assert_eq!(shout(&locks, "hi").await.expect("locked call"), "HI");
    let editor = Editor {
        locks: &locks,
        name: "ada",
    };
    assert_eq!(editor.name().await.expect("locked call"), "ada");
}
