//! Preparation benchmarks.

fn main() {}
