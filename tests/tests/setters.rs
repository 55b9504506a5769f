//! The builder's and the options' setters may come in any order: the result never depends on it.

use std::time::Duration;

use lock_runtime::{LockManagerBuilder, Mode, OnLeaseLost, ReplicaShortage, TlsConfig};
use lock_tests::prelude::*;

type BuilderSetter = (&'static str, fn(LockManagerBuilder) -> LockManagerBuilder);

/// One call of each builder setter, with a value other than the default. `url` stands for the
/// deployment setters (`cluster`, `sentinel`, `redlock` set the same URL: the last one wins).
fn builder_setters() -> Vec<BuilderSetter> {
    vec![
        ("url", |b| b.url("redis://127.0.0.1:1")),
        ("key_prefix", |b| b.key_prefix("app:")),
        ("app_name", |b| b.app_name("billing")),
        ("request_timeout", |b| b.request_timeout(ms(700))),
        ("fair_turn", |b| b.fair_turn(ms(900))),
        ("holder_metadata", |b| b.holder_metadata(false)),
        ("wait_for_replicas", |b| b.wait_for_replicas(1, ms(100))),
        ("replica_shortage", |b| {
            b.replica_shortage(ReplicaShortage::UseConnected)
        }),
        ("runtime", |b| b.runtime(tokio::runtime::Handle::current())),
        ("tls", |b| {
            b.tls(TlsConfig::new().root_ca_file("/etc/redis/tls/ca.crt"))
        }),
    ]
}

/// Every pair of builder setters, called in either order, gives the same settings.
#[tokio::test]
async fn every_pair_of_builder_setters_gives_the_same_settings_in_either_order() {
    let setters = builder_setters();
    for (i, (first, set_first)) in setters.iter().enumerate() {
        for (second, set_second) in &setters[i + 1..] {
            let forth = set_second(set_first(LockManager::builder()));
            let back = set_first(set_second(LockManager::builder()));
            assert_eq!(
                format!("{forth:?}"),
                format!("{back:?}"),
                "{first} then {second}, and the other way round"
            );
        }
    }
}

/// `fence_retention` has nothing left to keep: the deprecated setter still compiles and
/// changes nothing.
#[tokio::test]
#[allow(deprecated)]
async fn the_deprecated_fence_retention_changes_nothing() {
    for retention in [Duration::ZERO, ms(60_000), Duration::MAX] {
        let set = LockManager::builder().fence_retention(retention);
        assert_eq!(format!("{set:?}"), format!("{:?}", LockManager::builder()));
        let built = set.url("memory://fence-retention").build().await;
        assert!(built.is_ok(), "{retention:?}: {:?}", built.err());
    }
}

/// The order the issue found wrong: the shortage policy given before `wait_for_replicas`.
#[tokio::test]
async fn a_replica_shortage_given_before_wait_for_replicas_applies() {
    let builder = LockManager::builder()
        .replica_shortage(ReplicaShortage::UseConnected)
        .wait_for_replicas(1, ms(100));
    let shown = format!("{builder:?}");
    assert!(shown.contains("UseConnected"), "{shown}");
}

type OptionSetter = (&'static str, fn(LockOptions) -> LockOptions);

/// One call of each option setter, with a value other than the default.
fn option_setters() -> Vec<OptionSetter> {
    vec![
        ("ttl", |o| o.ttl(ms(5_000))),
        ("wait", |o| o.wait(ms(2_000))),
        ("watchdog", |o| o.watchdog(false)),
        ("on_lease_lost", |o| o.on_lease_lost(OnLeaseLost::Continue)),
        ("hold_at_least", |o| o.hold_at_least(ms(1_000))),
        ("max_hold", |o| o.max_hold(ms(60_000))),
        ("fair", |o| o.fair(true)),
        ("label", |o| o.label("order")),
        ("permits", |o| o.permits(3)),
        ("mode", |o| o.mode(Mode::Read)),
    ]
}

/// Every pair of option setters, called in either order, gives the same options.
#[test]
fn every_pair_of_option_setters_gives_the_same_options_in_either_order() {
    let setters = option_setters();
    for (i, (first, set_first)) in setters.iter().enumerate() {
        for (second, set_second) in &setters[i + 1..] {
            let forth = set_second(set_first(LockOptions::new()));
            let back = set_first(set_second(LockOptions::new()));
            assert_eq!(
                forth, back,
                "{first} then {second}, and the other way round"
            );
        }
    }
}
