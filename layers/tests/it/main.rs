//! The integration tests of `llm-context-layers`, in one binary (one link, not sixteen).

mod support;

mod artifacts;
mod budget;
mod calibration;
mod clear_steps;
mod compaction;
mod cut;
mod events;
mod executor;
mod layers;
mod memo;
mod pairing;
mod properties;
mod references;
mod stream;
mod summarize;
mod trace;
mod working_context;
