//! The shop's database: one SQLite file that every instance of the service opens (WAL mode, so
//! readers never block the one writer, and a busy timeout, so writers of several processes queue
//! instead of failing).
//!
//! The database does not check the shop's rules itself; the locks make them hold. The service
//! reads under a lock ("has this user ordered?", "how many are left?") and writes what it
//! decided, the new stock as a value, not as `quantity - 1`: without the locks two buyers would
//! both read 10 and both write 9.
//!
//! A lock can be lost without its holder knowing in time (a process stalled past its lease), so
//! the rows a lock protects are fenced with `lock_runtime::fence::sqlite`: each lock's resource
//! (`order:<user_id>`, `stock:<sku>`) has a fence in the `lock_fences` table, the highest
//! fencing token that claimed it. A holder first *claims* its resource with its token, before it
//! reads; the purchase then writes in one transaction that first *checks* that both fences are
//! still its tokens:
//!
//! ```text
//! fence::sqlite::claim(&mut conn, &Fence::new("stock:tea", token))   -- before the read
//! BEGIN IMMEDIATE; fence::sqlite::check(..user..); fence::sqlite::check(..stock..);
//!                  UPDATE stock ...; INSERT INTO orders ...; COMMIT
//! ```
//!
//! A refused claim or check (`FenceError::Stale`, or `NotClaimed`) is a refused stale write: a
//! newer holder has claimed the resource, so what this one read may be out of date. Fencing the
//! write alone would not do: a stale holder writing between a newer holder's read and its write
//! would be accepted (its token is above the resource's last *written* one), and the newer
//! holder would then write over it what it decided from its earlier read. Refusals are recorded
//! in a table of their own, so the runner can count them even when the instance that was
//! refused is gone.
//!
//! `orders` has no unique constraint on the user on purpose: at most one order per user is what
//! the locks and fences must achieve, and [`Audit`] checks it afterwards.

use std::path::Path;
use std::time::Duration;

use lock_runtime::LockError;
use lock_runtime::fence::{self, FenceError};
use sqlx::sqlite::SqliteSynchronous;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};

/// How long a writer waits for another process's write transaction before giving up. Longer
/// than a lock's lease, so a writer killed mid-transaction (its file lock goes with it) or a
/// long queue of buyers never turns into a failed order.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections per instance: the purchases queue on the stock lock anyway; reads of several
/// requests go in parallel.
const POOL_SIZE: u32 = 4;

const SCHEMA: &[&str] = &[
    "DROP TABLE IF EXISTS stock",
    "DROP TABLE IF EXISTS orders",
    "DROP TABLE IF EXISTS refusals",
    "DROP TABLE IF EXISTS lock_fences",
    "CREATE TABLE stock (sku TEXT PRIMARY KEY, initial INTEGER NOT NULL, \
     quantity INTEGER NOT NULL)",
    // The fences of `order:<user_id>` and `stock:<sku>`: the highest token that claimed each.
    fence::sqlite::SCHEMA,
    "CREATE TABLE orders (id INTEGER PRIMARY KEY AUTOINCREMENT, user_id INTEGER NOT NULL, \
     sku TEXT NOT NULL, user_token INTEGER NOT NULL, stock_token INTEGER NOT NULL, \
     instance TEXT NOT NULL)",
    "CREATE INDEX orders_by_user ON orders (user_id)",
    "CREATE TABLE refusals (id INTEGER PRIMARY KEY AUTOINCREMENT, fence TEXT NOT NULL, \
     token INTEGER NOT NULL, instance TEXT NOT NULL)",
];

/// What went wrong in the shop: the database, a lock, or a number SQLite cannot hold.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShopError {
    /// A statement failed; `doing` says which.
    #[error("database: {doing}: {source}")]
    Database {
        /// What was being done (`open`, `purchase: fence the stock row`, ...).
        doing: &'static str,
        /// The driver's error.
        source: sqlx::Error,
    },
    /// A lock could not be taken, or was lost.
    #[error(transparent)]
    Lock(#[from] LockError),
    /// A fence could not be claimed or checked (not a refusal: the database failed, or a token
    /// above `i64::MAX`).
    #[error(transparent)]
    Fence(#[from] FenceError),
    /// A user id, stock or fencing token above `i64::MAX`, which SQLite's integers cannot hold.
    #[error("{what} {value} does not fit the database's 64-bit signed integers")]
    OutOfRange {
        /// `user id`, `stock` or `fencing token`.
        what: &'static str,
        /// The value.
        value: u64,
    },
    /// A write that needs a fencing token ran outside a locked section.
    #[error("{0} ran outside its locked section: it has no fencing token")]
    NotLocked(&'static str),
}

/// `map_err` for a failed statement.
fn failed(doing: &'static str) -> impl FnOnce(sqlx::Error) -> ShopError {
    move |source| ShopError::Database { doing, source }
}

/// A `u64` as SQLite's `INTEGER`.
fn integer(what: &'static str, value: u64) -> Result<i64, ShopError> {
    i64::try_from(value).map_err(|_| ShopError::OutOfRange { what, value })
}

/// Which kind of row refused a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fence {
    /// The user's row, fenced by the `order:<user_id>` lock.
    User,
    /// The stock row, fenced by the `stock:<sku>` lock.
    Stock,
}

impl Fence {
    fn name(self) -> &'static str {
        match self {
            Fence::User => "user",
            Fence::Stock => "stock",
        }
    }
}

/// A row protected by a lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Row<'a> {
    /// The user's, under `order:<user_id>`.
    User(u64),
    /// The item's stock, under `stock:<sku>`.
    Stock(&'a str),
}

impl Row<'_> {
    fn fence(self) -> Fence {
        match self {
            Row::User(_) => Fence::User,
            Row::Stock(_) => Fence::Stock,
        }
    }

    /// The fence of the row's resource, named as its lock's key, at `token`.
    fn at(self, token: u64) -> fence::Fence {
        match self {
            Row::User(user_id) => fence::Fence::new(format!("order:{user_id}"), token),
            Row::Stock(sku) => fence::Fence::new(format!("stock:{sku}"), token),
        }
    }
}

/// One purchase, with the fencing tokens of the two locks its caller holds.
#[derive(Clone, Copy, Debug)]
pub struct Order<'a> {
    /// Who buys.
    pub user_id: u64,
    /// What.
    pub sku: &'a str,
    /// The token of `order:<user_id>`.
    pub user_token: u64,
    /// The token of `stock:<sku>`.
    pub stock_token: u64,
    /// The instance writing it, recorded with the order.
    pub instance: &'a str,
}

/// What became of a purchase: [`Database::purchase`] answers `Placed` or `Stale`, the service's
/// checks before it `Duplicate` or `SoldOut`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purchase {
    /// The order is recorded and the stock decremented, in one transaction.
    Placed,
    /// The user already had an order; nothing written.
    Duplicate,
    /// No stock left; nothing written.
    SoldOut,
    /// A newer holder of a row's lock had claimed the row: this holder's lock was taken over.
    /// Nothing written; the refusal recorded.
    Stale(Fence),
}

/// The shop's database, shared by every instance through one file.
#[derive(Clone, Debug)]
pub struct Database {
    pool: SqlitePool,
}

impl Database {
    /// Creates the file if needed, replaces the shop's tables with empty ones and puts `stock`
    /// items of `sku` on sale.
    pub async fn create(path: &Path, sku: &str, stock: u64) -> Result<Database, ShopError> {
        let db = Database::connect(path, true).await?;
        let stock = integer("stock", stock)?;
        let mut tx = db.pool.begin().await.map_err(failed("create: begin"))?;
        for statement in SCHEMA {
            sqlx::query(statement)
                .execute(&mut *tx)
                .await
                .map_err(failed("create: schema"))?;
        }
        sqlx::query("INSERT INTO stock (sku, initial, quantity) VALUES (?1, ?2, ?2)")
            .bind(sku)
            .bind(stock)
            .execute(&mut *tx)
            .await
            .map_err(failed("create: stock"))?;
        tx.commit().await.map_err(failed("create: commit"))?;
        Ok(db)
    }

    /// Opens a database [`create`](Self::create) made.
    pub async fn open(path: &Path) -> Result<Database, ShopError> {
        Database::connect(path, false).await
    }

    async fn connect(path: &Path, create: bool) -> Result<Database, ShopError> {
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(create)
            .journal_mode(SqliteJournalMode::Wal)
            // In WAL mode a commit survives a killed process without an fsync per commit; only
            // a power cut may lose the last ones.
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(BUSY_TIMEOUT);
        let pool = SqlitePoolOptions::new()
            .max_connections(POOL_SIZE)
            .connect_with(options)
            .await
            .map_err(failed("open"))?;
        Ok(Database { pool })
    }

    /// Whether `user_id` has an order.
    pub async fn has_order(&self, user_id: u64) -> Result<bool, ShopError> {
        let user_id = integer("user id", user_id)?;
        let found = sqlx::query_scalar::<_, i64>("SELECT 1 FROM orders WHERE user_id = ?1 LIMIT 1")
            .bind(user_id)
            .fetch_optional(&self.pool)
            .await
            .map_err(failed("read the user's order"))?;
        Ok(found.is_some())
    }

    /// The items of `sku` left. Stock only goes down, so a 0 read without any lock is final.
    pub async fn stock_left(&self, sku: &str) -> Result<i64, ShopError> {
        sqlx::query_scalar("SELECT quantity FROM stock WHERE sku = ?1")
            .bind(sku)
            .fetch_one(&self.pool)
            .await
            .map_err(failed("read the stock"))
    }

    /// Claims the row `row` for `token`: from now on the row refuses writes decided under an
    /// older token. Returns `false` when a newer token has claimed it (this holder's lock was
    /// taken over); the refusal is then recorded.
    pub async fn claim(&self, row: Row<'_>, token: u64, instance: &str) -> Result<bool, ShopError> {
        let fence = row.at(token);
        let mut conn = self.pool.acquire().await.map_err(failed("claim a row"))?;
        match fence::sqlite::claim(&mut conn, &fence).await {
            Ok(()) => Ok(true),
            Err(err) if err.is_refusal() => {
                self.refused(row.fence(), token, instance).await?;
                Ok(false)
            }
            Err(err) => Err(err.into()),
        }
    }

    /// Records `order` and sets the stock of its item to `stock_after`, in one transaction (so a
    /// process killed halfway leaves neither), each row written only if no newer token than
    /// the one its lock gave has claimed it.
    ///
    /// The caller [claimed](Self::claim) both rows with its tokens, then decided under its locks
    /// that the user has no order and that the stock read was `stock_after + 1`; the fences
    /// refuse the writes when a newer holder of either lock has claimed its row since.
    pub async fn purchase(
        &self,
        order: &Order<'_>,
        stock_after: i64,
    ) -> Result<Purchase, ShopError> {
        let user_id = integer("user id", order.user_id)?;
        let user_token = integer("fencing token", order.user_token)?;
        let stock_token = integer("fencing token", order.stock_token)?;
        // Writes only: take the write lock at once, queueing behind other processes' writers
        // (a DEFERRED transaction could fail at its first write instead).
        let mut tx = self
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(failed("purchase: begin"))?;
        for (row, token) in [
            (Row::User(order.user_id), order.user_token),
            (Row::Stock(order.sku), order.stock_token),
        ] {
            match fence::sqlite::check(&mut tx, &row.at(token)).await {
                Ok(()) => {}
                Err(err) if err.is_refusal() => {
                    // Recorded once the write lock is given back.
                    tx.rollback().await.map_err(failed("purchase: roll back"))?;
                    self.refused(row.fence(), token, order.instance).await?;
                    return Ok(Purchase::Stale(row.fence()));
                }
                Err(err) => return Err(err.into()),
            }
        }
        sqlx::query("UPDATE stock SET quantity = ?1 WHERE sku = ?2")
            .bind(stock_after)
            .bind(order.sku)
            .execute(&mut *tx)
            .await
            .map_err(failed("purchase: write the stock"))?;
        sqlx::query(
            "INSERT INTO orders (user_id, sku, user_token, stock_token, instance) \
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )
        .bind(user_id)
        .bind(order.sku)
        .bind(user_token)
        .bind(stock_token)
        .bind(order.instance)
        .execute(&mut *tx)
        .await
        .map_err(failed("purchase: record the order"))?;
        tx.commit().await.map_err(failed("purchase: commit"))?;
        Ok(Purchase::Placed)
    }

    async fn refused(&self, fence: Fence, token: u64, instance: &str) -> Result<(), ShopError> {
        let token = integer("fencing token", token)?;
        sqlx::query("INSERT INTO refusals (fence, token, instance) VALUES (?1, ?2, ?3)")
            .bind(fence.name())
            .bind(token)
            .bind(instance)
            .execute(&self.pool)
            .await
            .map_err(failed("record a refused write"))?;
        Ok(())
    }

    /// Reads what the invariants are checked on.
    pub async fn audit(&self, sku: &str) -> Result<Audit, ShopError> {
        let (initial, stock_left): (i64, i64) =
            sqlx::query_as("SELECT initial, quantity FROM stock WHERE sku = ?1")
                .bind(sku)
                .fetch_one(&self.pool)
                .await
                .map_err(failed("audit: stock"))?;
        let count = |sql: &'static str| async move {
            sqlx::query_scalar::<_, i64>(sql)
                .fetch_one(&self.pool)
                .await
                .map_err(failed("audit: count"))
        };
        let per_instance = sqlx::query_as(
            "SELECT instance, COUNT(*) FROM orders GROUP BY instance ORDER BY instance",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(failed("audit: orders per instance"))?;
        Ok(Audit {
            initial,
            stock_left,
            orders: count("SELECT COUNT(*) FROM orders").await?,
            users_with_orders: count("SELECT COUNT(DISTINCT user_id) FROM orders").await?,
            users_with_several: count(
                "SELECT COUNT(*) FROM \
                 (SELECT user_id FROM orders GROUP BY user_id HAVING COUNT(*) > 1)",
            )
            .await?,
            // Purchases are serialised, so ids follow commit order and so must stock tokens.
            tokens_out_of_order: count(
                "SELECT COUNT(*) FROM (SELECT stock_token, \
                 LAG(stock_token) OVER (ORDER BY id) AS previous FROM orders) \
                 WHERE stock_token <= previous",
            )
            .await?,
            refused_writes: count("SELECT COUNT(*) FROM refusals").await?,
            orders_per_instance: per_instance,
        })
    }
}

/// The database's state after a run, and the invariants it must keep.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Audit {
    /// The stock put on sale.
    pub initial: i64,
    /// The stock left.
    pub stock_left: i64,
    /// Orders recorded.
    pub orders: i64,
    /// Users with at least one order.
    pub users_with_orders: i64,
    /// Users with more than one order (must be 0).
    pub users_with_several: i64,
    /// Orders whose stock token is not above the previous order's (must be 0).
    pub tokens_out_of_order: i64,
    /// Writes the fences refused.
    pub refused_writes: i64,
    /// Orders recorded by each instance, by name.
    pub orders_per_instance: Vec<(String, i64)>,
}

impl Audit {
    /// The invariants that do not hold, each as one sentence; empty when all hold.
    pub fn broken(&self) -> Vec<String> {
        let mut broken = Vec::new();
        if self.orders > self.initial {
            broken.push(format!(
                "oversold: {} orders for a stock of {}",
                self.orders, self.initial
            ));
        }
        // Stock only goes down, so a negative value would still be there at the end.
        if self.stock_left < 0 {
            broken.push(format!("stock went negative: {}", self.stock_left));
        }
        if self.stock_left + self.orders != self.initial {
            broken.push(format!(
                "stock {} + orders {} != initial stock {}",
                self.stock_left, self.orders, self.initial
            ));
        }
        if self.users_with_several > 0 {
            broken.push(format!(
                "{} users have more than one order",
                self.users_with_several
            ));
        }
        if self.tokens_out_of_order > 0 {
            broken.push(format!(
                "{} orders were accepted with a stock token not above the previous one",
                self.tokens_out_of_order
            ));
        }
        broken
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn audit() -> Audit {
        Audit {
            initial: 10,
            stock_left: 4,
            orders: 6,
            users_with_orders: 6,
            users_with_several: 0,
            tokens_out_of_order: 0,
            refused_writes: 0,
            orders_per_instance: Vec::new(),
        }
    }

    #[test]
    fn a_consistent_audit_breaks_nothing() {
        assert!(audit().broken().is_empty());
    }

    #[test]
    fn an_oversold_stock_is_reported() {
        let oversold = Audit {
            stock_left: -1,
            orders: 11,
            users_with_orders: 11,
            ..audit()
        };
        assert_eq!(oversold.broken().len(), 2, "{:?}", oversold.broken());
    }

    #[test]
    fn an_order_without_its_item_is_reported() {
        let lost = Audit {
            stock_left: 3,
            ..audit()
        };
        assert_eq!(lost.broken().len(), 1, "{:?}", lost.broken());
    }

    #[test]
    fn a_second_order_of_a_user_is_reported() {
        let doubled = Audit {
            users_with_several: 1,
            users_with_orders: 5,
            ..audit()
        };
        assert_eq!(doubled.broken().len(), 1);
    }

    /// A database file of its own, removed with its WAL files on drop.
    struct Scratch(std::path::PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let dir = std::env::temp_dir();
            Scratch(dir.join(format!("shop-db-{name}-{}.sqlite", std::process::id())))
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            for suffix in ["", "-wal", "-shm"] {
                let mut path = self.0.clone().into_os_string();
                path.push(suffix);
                let _ = std::fs::remove_file(path);
            }
        }
    }

    fn order(user_id: u64, user_token: u64, stock_token: u64) -> Order<'static> {
        Order {
            user_id,
            sku: "sku",
            user_token,
            stock_token,
            instance: "test",
        }
    }

    /// Claims both rows of `order`, as the service does under its locks, then buys.
    async fn buy(db: &Database, order: &Order<'_>, stock_after: i64) -> Purchase {
        assert!(
            db.claim(Row::User(order.user_id), order.user_token, "t")
                .await
                .expect("claim")
        );
        assert!(
            db.claim(Row::Stock(order.sku), order.stock_token, "t")
                .await
                .expect("claim")
        );
        db.purchase(order, stock_after).await.expect("buy")
    }

    #[tokio::test]
    async fn a_purchase_records_one_order_and_the_new_stock() {
        let file = Scratch::new("placed");
        let db = Database::create(&file.0, "sku", 2).await.expect("create");
        assert!(!db.has_order(1).await.expect("read"));
        assert_eq!(buy(&db, &order(1, 10, 10), 1).await, Purchase::Placed);
        assert!(db.has_order(1).await.expect("read"));
        let audit = db.audit("sku").await.expect("audit");
        assert_eq!((audit.orders, audit.stock_left), (1, 1));
        assert!(audit.broken().is_empty(), "{:?}", audit.broken());
    }

    #[tokio::test]
    async fn a_claim_with_a_token_below_the_rows_is_refused() {
        let file = Scratch::new("claim");
        let db = Database::create(&file.0, "sku", 5).await.expect("create");
        assert!(db.claim(Row::Stock("sku"), 20, "t").await.expect("claim"));
        // The same holder again: its token is the fence.
        assert!(db.claim(Row::Stock("sku"), 20, "t").await.expect("claim"));
        assert!(!db.claim(Row::Stock("sku"), 19, "t").await.expect("claim"));
        assert!(db.claim(Row::User(1), 3, "t").await.expect("claim"));
        assert!(!db.claim(Row::User(1), 2, "t").await.expect("claim"));
        assert_eq!(db.audit("sku").await.expect("audit").refused_writes, 2);
    }

    #[tokio::test]
    async fn a_write_between_a_newer_claim_and_its_write_is_refused() {
        let file = Scratch::new("stale-stock");
        let db = Database::create(&file.0, "sku", 5).await.expect("create");
        // Token 19 claimed and read 5, then stalled; token 20 claimed and read 5 too.
        assert!(db.claim(Row::User(1), 1, "t").await.expect("claim"));
        assert!(db.claim(Row::Stock("sku"), 19, "t").await.expect("claim"));
        assert!(db.claim(Row::User(2), 1, "t").await.expect("claim"));
        assert!(db.claim(Row::Stock("sku"), 20, "t").await.expect("claim"));
        // 19 wakes up and writes first: refused, though 20 has not written yet.
        let late = db.purchase(&order(1, 1, 19), 4).await.expect("buy");
        assert_eq!(late, Purchase::Stale(Fence::Stock));
        let placed = db.purchase(&order(2, 1, 20), 4).await.expect("buy");
        assert_eq!(placed, Purchase::Placed);
        let audit = db.audit("sku").await.expect("audit");
        assert_eq!((audit.orders, audit.stock_left), (1, 4));
        assert!(audit.broken().is_empty(), "{:?}", audit.broken());
        assert_eq!(audit.refused_writes, 1);
    }

    #[tokio::test]
    async fn an_order_decided_under_an_older_user_token_is_refused() {
        let file = Scratch::new("stale-user");
        let db = Database::create(&file.0, "sku", 5).await.expect("create");
        // The user's request under token 6 checked "no order yet", then stalled; 7 bought.
        assert!(db.claim(Row::User(1), 6, "t").await.expect("claim"));
        assert_eq!(buy(&db, &order(1, 7, 1), 4).await, Purchase::Placed);
        assert!(db.claim(Row::Stock("sku"), 2, "t").await.expect("claim"));
        let late = db.purchase(&order(1, 6, 2), 3).await.expect("buy");
        assert_eq!(late, Purchase::Stale(Fence::User));
        let audit = db.audit("sku").await.expect("audit");
        assert_eq!(audit.users_with_several, 0);
        assert_eq!(audit.stock_left, 4, "the stock row is untouched");
    }

    #[tokio::test]
    async fn the_stock_is_read_as_written() {
        let file = Scratch::new("stock");
        let db = Database::create(&file.0, "sku", 1).await.expect("create");
        assert_eq!(db.stock_left("sku").await.expect("read"), 1);
        assert_eq!(buy(&db, &order(1, 1, 1), 0).await, Purchase::Placed);
        assert_eq!(db.stock_left("sku").await.expect("read"), 0);
    }
}
