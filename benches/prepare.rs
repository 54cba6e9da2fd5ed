//! The preparation benchmark (the core issue adds its body).

fn main() {}
