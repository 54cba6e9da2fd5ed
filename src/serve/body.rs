//! Reading a request's body, once its key has been checked: within the tenant's size
//! limit, within the server's budget of body bytes in flight, and at a minimum rate.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, StatusCode, header};
use futures_util::StreamExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// The request bytes read at once by default, every request's body together; past it a
/// request is shed with 503 before its body is read.
pub const DEFAULT_MAX_INFLIGHT_BODY_BYTES: usize = 256 * 1024 * 1024;

/// How long a body may take before the minimum rate applies, by default.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// The slowest a body may arrive by default, after [`DEFAULT_BODY_TIMEOUT`]: 64 KiB/s.
pub const DEFAULT_MIN_BODY_RATE: u64 = 64 * 1024;

/// The budget is counted in KiB, so that a 4 GiB limit fits a semaphore's `u32` permits.
const UNIT: usize = 1024;

/// The body settings of one server.
#[derive(Debug)]
pub(crate) struct Bodies {
    /// Every body's bytes in flight, in [`UNIT`]s.
    pub(crate) budget: Arc<Semaphore>,
    /// The budget's size, in [`UNIT`]s.
    units: usize,
    pub(crate) timeout: Duration,
    /// Bytes per second, at least 1.
    pub(crate) min_rate: u64,
}

impl Bodies {
    pub(crate) fn new(max_inflight_bytes: usize, timeout: Duration, min_rate: u64) -> Self {
        let total = units(max_inflight_bytes).min(Semaphore::MAX_PERMITS);
        Self {
            budget: Arc::new(Semaphore::new(total)),
            units: total,
            timeout,
            min_rate: min_rate.max(1),
        }
    }
}

/// A body that could not be read: the status and what to tell the client.
#[derive(Debug)]
pub(crate) struct Refused {
    pub(crate) status: StatusCode,
    pub(crate) message: String,
}

/// The body bytes and their share of the budget, released when dropped.
#[derive(Debug)]
pub(crate) struct Read {
    pub(crate) bytes: Bytes,
    pub(crate) held: OwnedSemaphorePermit,
    /// The body as the client compressed it, and its `content-encoding`, when it came
    /// compressed (`bytes` is then the body decoded).
    pub(crate) encoded: Option<(Bytes, axum::http::HeaderValue)>,
}

/// Reads `body` of at most `limit` bytes. A declared length over the limit is refused
/// (413) before anything is read; one the budget has no room for is shed (503). A body
/// whose length is not declared takes its share of the budget as it arrives. Having
/// read `n` bytes, the next must come within `timeout + n / min_rate` of the start, so a
/// client sending at the minimum rate or faster is never cut, and a trickle is (408).
pub(crate) async fn read(
    bodies: &Bodies,
    headers: &HeaderMap,
    body: Body,
    limit: usize,
) -> Result<Read, Refused> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let too_large = || Refused {
        status: StatusCode::PAYLOAD_TOO_LARGE,
        message: format!("the request body is over this server's limit of {limit} bytes"),
    };
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let reserved = declared.map_or(0, |n| n as usize);
    // What it will hold once read, at the least (its bytes, its parsed form, the body
    // written upstream): a request with no room for that is refused before its body is
    // read, not after.
    let mut held = take(&bodies.budget, 0)?;
    bodies.hold(&mut held, holding(reserved, 0))?;
    let started = Instant::now();
    let mut buf = Vec::with_capacity(reserved);
    let mut stream = body.into_data_stream();
    loop {
        let allowed =
            bodies.timeout + Duration::from_secs_f64(buf.len() as f64 / bodies.min_rate as f64);
        let next = match tokio::time::timeout_at(started + allowed, stream.next()).await {
            Ok(next) => next,
            Err(_) => {
                return Err(Refused {
                    status: StatusCode::REQUEST_TIMEOUT,
                    message: format!(
                        "the request body arrived slower than {} bytes per second",
                        bodies.min_rate
                    ),
                });
            }
        };
        let Some(chunk) = next else { break };
        let chunk = chunk.map_err(|e| Refused {
            status: StatusCode::BAD_REQUEST,
            message: format!("the request body could not be read: {e}"),
        })?;
        let total = buf.len() + chunk.len();
        if total > limit {
            return Err(too_large());
        }
        // More than declared (or nothing declared): its share is taken as it arrives.
        take_more(&bodies.budget, &mut held, total)?;
        buf.extend_from_slice(&chunk);
    }
    Ok(Read {
        bytes: Bytes::from(buf),
        held,
        encoded: None,
    })
}

/// `n` units of the budget now, or 503.
fn take(budget: &Arc<Semaphore>, n: usize) -> Result<OwnedSemaphorePermit, Refused> {
    let n = u32::try_from(n).unwrap_or(u32::MAX);
    budget
        .clone()
        .try_acquire_many_owned(n)
        .map_err(|_| Refused {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: "the server is reading as many request bodies as it can hold: retry shortly"
                .to_owned(),
        })
}

/// What a request read from a body of `bytes` with `messages` messages holds until it is
/// answered, at its peak, in bytes: its body (kept, to send its unedited spans as
/// slices of it), the text read from it (and, while a string is read, the parser's
/// scratch copy of it), and a cost a message (the neutral message, its place in the
/// planner's lists and in the kept body's index). Measured with
/// `scripts/hostile_serve.py` (BENCHMARKS.md): one request peaks at 3.0× its body for one
/// huge message, and at 2.6× for 100,000 small ones.
pub(crate) fn holding(bytes: usize, messages: usize) -> usize {
    const PER_MESSAGE: usize = 1024;
    bytes
        .saturating_mul(3)
        .saturating_add(messages.saturating_mul(PER_MESSAGE))
}

impl Bodies {
    /// `held` grown to the share of `bytes` (what a request read holds, [`holding`]), or
    /// 503 when other requests hold the rest of the budget. A request alone may hold more
    /// than the whole budget (it takes all of it): a budget smaller than one request
    /// within the body limit must not refuse that request forever.
    pub(crate) fn hold(
        &self,
        held: &mut OwnedSemaphorePermit,
        bytes: usize,
    ) -> Result<(), Refused> {
        match take_more(&self.budget, held, bytes) {
            Ok(()) => Ok(()),
            Err(_) if held.num_permits() + self.budget.available_permits() >= self.units => {
                let rest = self.budget.available_permits();
                held.merge(take(&self.budget, rest)?);
                Ok(())
            }
            Err(refused) => Err(refused),
        }
    }
}

/// `held` grown to the share of `bytes`, or 503 when the budget has no room for it.
pub(crate) fn take_more(
    budget: &Arc<Semaphore>,
    held: &mut OwnedSemaphorePermit,
    bytes: usize,
) -> Result<(), Refused> {
    let have = held.num_permits();
    if units(bytes) > have {
        held.merge(take(budget, units(bytes) - have)?);
    }
    Ok(())
}

/// Bytes in budget units, rounded up.
fn units(bytes: usize) -> usize {
    bytes.div_ceil(UNIT)
}
