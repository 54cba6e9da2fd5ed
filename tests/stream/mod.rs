//! Helpers of the streaming tests.
#![allow(dead_code)]

pub(crate) mod server;
