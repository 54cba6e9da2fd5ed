//! [`Memo`]: the service, and what one memoized call does.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use tower::{Service, ServiceExt};

use super::breaker::unusable;
use super::degrade::{degraded, skipped, timed_out};
use super::flight::{FlightError, Join, follow};
use super::future::ResponseFuture;
use super::key::MemoKey;
use super::layer::MemoLayer;
use super::predicate::{DefaultPredicate, MemoPredicate};
use super::shared_flight::{self, Settled};
use super::state::{MemoState, debug_memo};
use super::store::MemoStore;
use crate::BoxError;
use crate::model::PreparationReport;
use crate::model::{ChatRequest, ChatResponse, MemoHint};
use crate::store::StoreErrorKind;

/// The service of [`MemoLayer`]. See the [module docs](super).
#[derive(Clone)]
pub struct Memo<S, P = DefaultPredicate> {
    pub(crate) inner: S,
    shared: Option<Arc<MemoState>>,
    predicate: P,
}

impl<S, P> fmt::Debug for Memo<S, P>
where
    S: fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_memo(f, "Memo", self.shared.as_deref(), Some(&self.inner))
    }
}

impl<S> Memo<S> {
    /// Wraps `inner`, memoizing in `store` what the [`DefaultPredicate`] allows.
    pub fn new(inner: S, store: Arc<dyn MemoStore>) -> Self {
        tower::Layer::layer(&MemoLayer::new(store), inner)
    }

    /// A [`MemoLayer`] with this store.
    pub fn layer(store: Arc<dyn MemoStore>) -> MemoLayer {
        MemoLayer::new(store)
    }
}

impl<S, P> Memo<S, P> {
    pub(crate) fn from_parts(inner: S, shared: Option<Arc<MemoState>>, predicate: P) -> Self {
        Self {
            inner,
            shared,
            predicate,
        }
    }

    inner_accessors!(inner);
}

impl<S, P> Service<ChatRequest> for Memo<S, P>
where
    S: Service<ChatRequest, Response = ChatResponse> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    P: MemoPredicate,
{
    type Response = ChatResponse;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: ChatRequest) -> Self::Future {
        let shared = match &self.shared {
            Some(shared) if req.memo != MemoHint::Never && self.predicate.should_memoize(&req) => {
                Arc::clone(shared)
            }
            _ => return ResponseFuture::bypass(self.inner.call(req)),
        };
        let key = MemoKey::for_upstream(&req, &shared.upstream);
        // The ready service goes into the future; a clone stays for the next poll_ready.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        ResponseFuture::memo(Box::pin(memoized(inner, req, key, shared)))
    }
}

/// One memoizable call: join the flight for the key; the leader looks in the store and,
/// on a miss, calls `inner` and stores the answer; followers take the leader's outcome.
async fn memoized<S>(
    mut inner: S,
    req: ChatRequest,
    key: MemoKey,
    shared: Arc<MemoState>,
) -> Result<ChatResponse, BoxError>
where
    S: Service<ChatRequest, Response = ChatResponse> + Clone,
    S::Error: Into<BoxError>,
{
    let mut ready = true;
    let lead = loop {
        match shared.flights.join(&key) {
            Join::Leader(lead) => break lead,
            Join::Follower(rx) => {
                if ready {
                    // Give back what readiness reserved (a concurrency permit, a buffer
                    // slot) instead of holding it while another request does the work.
                    inner = inner.clone();
                    ready = false;
                }
                match follow(rx).await {
                    Some(Ok(response)) => return Ok(served_from_memo(response)),
                    Some(Err(message)) => return Err(FlightError::new(&*message).into()),
                    // The leader was cancelled: try again, perhaps as the leader.
                    None => continue,
                }
            }
        }
    };

    let store_reachable = match lookup(&shared, &key).await {
        Lookup::Hit(response) => {
            lead.publish(Ok((*response).clone()));
            return Ok(served_from_memo(*response));
        }
        Lookup::Miss => true,
        // A store that cannot be reached is not asked again for this request: that would
        // double the time it waits. A bad entry is overwritten.
        Lookup::Failed(kind) => !unusable(kind),
    };

    // Across processes sharing the store: one of them makes the call, the others wait
    // for its answer in the store.
    let lease = if store_reachable {
        let give_back = || {
            if ready {
                inner = inner.clone();
                ready = false;
            }
        };
        match shared_flight::claim_or_wait(&shared, &key, give_back).await {
            Settled::Answered(response) => {
                lead.publish(Ok((*response).clone()));
                return Ok(served_from_memo(*response));
            }
            Settled::Lead(lease) => lease,
        }
    } else {
        None
    };

    if !ready && let Err(error) = inner.ready().await.map_err(Into::<BoxError>::into) {
        shared_flight::release(&shared, &key, lease).await;
        return Err(error);
    }
    let call = inner.call(req);
    let result: Result<ChatResponse, BoxError> =
        shared_flight::renewing(&shared, &key, lease.as_deref(), call)
            .await
            .map_err(Into::into);
    match result {
        Ok(response) => {
            // What the inner layers did to *this* request is not part of the answer.
            let mut stored = response.clone();
            stored.report = PreparationReport::default();
            lead.publish(Ok(stored.clone()));
            if store_reachable {
                save(&shared, &key, &stored).await;
            }
            // After the answer is stored, so that a waiter elsewhere finds it.
            shared_flight::release(&shared, &key, lease).await;
            Ok(response)
        }
        Err(error) => {
            // At once: waiters elsewhere make the call themselves rather than wait out
            // the lease.
            shared_flight::release(&shared, &key, lease).await;
            lead.publish(Err(Arc::from(error.to_string())));
            Err(error)
        }
    }
}

fn served_from_memo(mut response: ChatResponse) -> ChatResponse {
    response.report = PreparationReport::memo_hit();
    response
}

enum Lookup {
    Hit(Box<ChatResponse>),
    Miss,
    Failed(StoreErrorKind),
}

async fn lookup(shared: &MemoState, key: &MemoKey) -> Lookup {
    if let Some(reason) = shared.breaker.skipped_for() {
        degraded("get", key, &skipped(shared, &reason));
        return Lookup::Failed(reason.kind);
    }
    let error = match tokio::time::timeout(shared.timeout, shared.store.get(key)).await {
        Ok(Ok(found)) => {
            shared.breaker.succeeded();
            return match found {
                Some(response) => Lookup::Hit(Box::new(response)),
                None => Lookup::Miss,
            };
        }
        Ok(Err(error)) => error,
        Err(_) => timed_out(shared),
    };
    shared.breaker.failed(&error);
    degraded("get", key, &error);
    Lookup::Failed(error.kind)
}

async fn save(shared: &MemoState, key: &MemoKey, response: &ChatResponse) {
    match tokio::time::timeout(shared.timeout, shared.store.put(key, response)).await {
        Ok(Ok(())) => {}
        // A response over the store's size bound is policy, not an outage.
        Ok(Err(error)) if error.kind == StoreErrorKind::TooLarge => tracing::debug!(
            event = "memo_not_stored",
            scope = %key.scope_key(),
            reason = %error,
            "memo: response not stored: {error}"
        ),
        Ok(Err(error)) => {
            shared.breaker.failed(&error);
            degraded("put", key, &error);
        }
        Err(_) => {
            let error = timed_out(shared);
            shared.breaker.failed(&error);
            degraded("put", key, &error);
        }
    }
}
