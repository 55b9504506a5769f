//! Compile-time behaviour of `#[distributed_lock]`: every mistake in `ui/fail` must be rejected
//! with the message checked in next to it, and every form in `ui/pass` must compile and run.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("ui/fail/*.rs");
    t.pass("ui/pass/*.rs");
}
