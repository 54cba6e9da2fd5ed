//! Macros that give every service of the crate the same surface.

/// `get_ref`, `get_mut` and `into_inner` for a service whose wrapped service is reached
/// through the fields named (`inner`, or `fit.inner`), inside an `impl` block where the
/// wrapped service's type is `S`.
macro_rules! inner_accessors {
    ($($field:ident).+) => {
        /// The inner service.
        pub fn get_ref(&self) -> &S {
            &self.$($field).+
        }

        /// The inner service, mutably.
        pub fn get_mut(&mut self) -> &mut S {
            &mut self.$($field).+
        }

        /// The inner service, consuming the wrapper.
        pub fn into_inner(self) -> S {
            self.$($field).+
        }
    };
}
