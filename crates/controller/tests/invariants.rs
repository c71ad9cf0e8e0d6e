//! The upgrade invariant checker that the integration suites run over their namespaces' history
//! catches each broken invariant, and reports nothing when all hold.

mod support;

#[test]
fn the_checker_catches_each_broken_invariant() {
    support::invariants::self_test();
}
