//! How a stream can fail on its own terms.

/// A stream that does not add up to a response.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    /// The stream ended before its final event: the response is incomplete.
    #[error("the stream ended before the response was complete")]
    Incomplete,
    /// The events contradict each other.
    #[error("the stream is inconsistent: {what}")]
    Inconsistent {
        /// What does not add up.
        what: String,
    },
}
