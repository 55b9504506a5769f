//! `lock-bench`: the scenarios come next.

fn main() {}
