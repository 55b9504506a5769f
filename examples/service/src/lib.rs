//! The heavier examples, kept out of the README's demo so that its first build stays small: in
//! [`shop`], the database, answers and locked service of the shop service that `shop_service`
//! serves over HTTP (axum, SQLite) and `shop_runner` drives and audits. The package's other
//! binaries are `metrics` (the Prometheus exporter) and `leader_scheduler` (the failover demo,
//! on a redis-server of its own). What every example shares (the backend from `REDIS_URL`,
//! logging, stopping on Ctrl-C) is in `lock_examples`.

pub mod shop;
