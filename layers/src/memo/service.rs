//! [`Memo`]: the service, and what one memoized call does.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use tower::{Service, ServiceExt};

use super::breaker::unusable;
use super::degrade::{degraded, skipped};
use super::flight::{FlightError, Join, Lead, follow};
use super::future::ResponseFuture;
use super::key::MemoKey;
use super::layer::MemoLayer;
use super::lease::MemoLease;
use super::predicate::{DefaultPredicate, MemoPredicate};
use super::shared_flight::{self, Settled};
use super::state::{MemoState, debug_memo};
use super::store::MemoStore;
use crate::BoxError;
use crate::future::take_ready;
use crate::model::PreparationReport;
use crate::model::{ChatRequest, ChatResponse, MemoHint};
use crate::store::StoreErrorKind;
use crate::stream::{ChatStream, StreamFuture, Streaming, on_end};
use crate::trace::store_call;

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
        let inner = take_ready(&mut self.inner);
        ResponseFuture::memo(Box::pin(memoized(inner, req, key, shared)))
    }
}

/// A streamed call: the same lookup, single flight and store, see
/// [`stream`](crate::stream).
impl<S, P> Service<Streaming> for Memo<S, P>
where
    S: Service<Streaming, Response = ChatStream> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    P: MemoPredicate,
{
    type Response = ChatStream;
    type Error = BoxError;
    type Future = StreamFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Service::<Streaming>::poll_ready(&mut self.inner, cx).map_err(Into::into)
    }

    fn call(&mut self, req: Streaming) -> Self::Future {
        let shared = match &self.shared {
            Some(shared)
                if req.0.memo != MemoHint::Never && self.predicate.should_memoize(&req.0) =>
            {
                Arc::clone(shared)
            }
            _ => {
                let call = self.inner.call(req);
                return Box::pin(async move { call.await.map_err(Into::into) });
            }
        };
        let key = MemoKey::for_upstream(&req.0, &shared.upstream);
        let inner = take_ready(&mut self.inner);
        Box::pin(memoized_stream(inner, req, key, shared))
    }
}

/// One memoizable call: join the flight for the key; the leader looks in the store and,
/// on a miss, calls `inner` and stores the answer; followers take the leader's outcome.
async fn memoized<S>(
    inner: S,
    req: ChatRequest,
    key: MemoKey,
    shared: Arc<MemoState>,
) -> Result<ChatResponse, BoxError>
where
    S: Service<ChatRequest, Response = ChatResponse> + Clone,
    S::Error: Into<BoxError>,
{
    let (mut inner, leading) = match settle::<_, ChatRequest>(inner, &key, &shared).await? {
        Settle::Served(response) => return Ok(*response),
        Settle::Lead(inner, leading) => (inner, leading),
    };
    let call = inner.call(req);
    let result: Result<ChatResponse, BoxError> =
        shared_flight::renewing(&shared, &key, leading.lease.as_deref(), call)
            .await
            .map_err(Into::into);
    match result {
        Ok(response) => Ok(leading.answered(&shared, &key, response).await),
        Err(error) => {
            leading
                .failed(&shared, &key, Arc::from(error.to_string()))
                .await;
            Err(error)
        }
    }
}

/// One memoizable streamed call, as [`memoized`]: a hit, or a waiter's answer, is
/// replayed as a stream; the leader's stream is stored once its `Done` arrives, and
/// nothing is stored when it fails (its lease is given up, its waiters get the error) or
/// is dropped (its flight ends, so waiters make the call again; a shared lease, which
/// cannot be given up without awaiting, lapses by its TTL).
async fn memoized_stream<S>(
    inner: S,
    req: Streaming,
    key: MemoKey,
    shared: Arc<MemoState>,
) -> Result<ChatStream, BoxError>
where
    S: Service<Streaming, Response = ChatStream> + Clone,
    S::Error: Into<BoxError>,
{
    let (mut inner, leading) = match settle::<_, Streaming>(inner, &key, &shared).await? {
        Settle::Served(response) => return Ok(ChatStream::replay(*response)),
        Settle::Lead(inner, leading) => (inner, leading),
    };
    let call = inner.call(req);
    let stream = match shared_flight::renewing(&shared, &key, leading.lease.as_deref(), call)
        .await
        .map_err(Into::<BoxError>::into)
    {
        Ok(stream) => stream,
        Err(error) => {
            leading
                .failed(&shared, &key, Arc::from(error.to_string()))
                .await;
            return Err(error);
        }
    };
    // The lead lives in the stream: dropped with it, it ends the flight.
    Ok(ChatStream::new(on_end(
        stream,
        (leading, shared, key),
        |(leading, shared, key), response| async move {
            Ok(leading.answered(&shared, &key, response).await)
        },
        |(leading, shared, key), error| {
            let message = Arc::from(error.to_string());
            async move { leading.failed(&shared, &key, message).await }
        },
    )))
}

/// How the first part of a memoized call ended.
enum Settle<S> {
    /// Answered from the store, another process or an identical request in flight.
    Served(Box<ChatResponse>),
    /// This request makes the call: `S` is ready.
    Lead(S, Leading),
}

/// What the request that makes the call holds.
struct Leading {
    lead: Lead,
    lease: Option<Box<dyn MemoLease>>,
    store_reachable: bool,
}

impl Leading {
    /// Publishes, stores and gives up the lease for a successful call; returns the
    /// caller's response.
    async fn answered(
        self,
        shared: &MemoState,
        key: &MemoKey,
        response: ChatResponse,
    ) -> ChatResponse {
        // What the inner layers did to *this* request is not part of the answer.
        let mut stored = response.clone();
        stored.report = PreparationReport::default();
        self.lead.publish(Ok(stored.clone()));
        if self.store_reachable {
            save(shared, key, &stored).await;
        }
        // After the answer is stored, so that a waiter elsewhere finds it.
        shared_flight::release(shared, key, self.lease).await;
        response
    }

    /// Gives up the lease at once (waiters elsewhere make the call themselves rather
    /// than wait it out) and tells the waiters here.
    async fn failed(self, shared: &MemoState, key: &MemoKey, message: Arc<str>) {
        shared_flight::release(shared, key, self.lease).await;
        self.lead.publish(Err(message));
    }
}

/// Joins the flight for the key; as the leader, looks in the store and claims the call
/// across processes. `inner` comes back ready when this request is to make the call.
async fn settle<S, R>(
    mut inner: S,
    key: &MemoKey,
    shared: &MemoState,
) -> Result<Settle<S>, BoxError>
where
    S: Service<R> + Clone,
    S::Error: Into<BoxError>,
{
    let mut ready = true;
    let lead = loop {
        match shared.flights.join(key) {
            Join::Leader(lead) => break lead,
            Join::Follower(rx) => {
                if ready {
                    // Give back what readiness reserved (a concurrency permit, a buffer
                    // slot) instead of holding it while another request does the work.
                    inner = inner.clone();
                    ready = false;
                }
                match follow(rx).await {
                    Some(Ok(response)) => {
                        return Ok(Settle::Served(Box::new(served_from_memo(response))));
                    }
                    Some(Err(message)) => return Err(FlightError::new(&*message).into()),
                    // The leader was cancelled: try again, perhaps as the leader.
                    None => continue,
                }
            }
        }
    };

    let store_reachable = match lookup(shared, key).await {
        Lookup::Hit(response) => {
            lead.publish(Ok((*response).clone()));
            return Ok(Settle::Served(Box::new(served_from_memo(*response))));
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
        match shared_flight::claim_or_wait(shared, key, give_back).await {
            Settled::Answered(response) => {
                lead.publish(Ok((*response).clone()));
                return Ok(Settle::Served(Box::new(served_from_memo(*response))));
            }
            Settled::Lead(lease) => lease,
        }
    } else {
        None
    };

    if !ready
        && let Err(error) = ServiceExt::<R>::ready(&mut inner)
            .await
            .map_err(Into::<BoxError>::into)
    {
        shared_flight::release(shared, key, lease).await;
        return Err(error);
    }
    Ok(Settle::Lead(
        inner,
        Leading {
            lead,
            lease,
            store_reachable,
        },
    ))
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
    let error = match store_call("memo.get", shared.timeout, shared.store.get(key)).await {
        Ok(found) => {
            shared.breaker.succeeded();
            return match found {
                Some(response) => Lookup::Hit(Box::new(response)),
                None => Lookup::Miss,
            };
        }
        Err(error) => error,
    };
    shared.breaker.failed(&error);
    degraded("get", key, &error);
    Lookup::Failed(error.kind)
}

async fn save(shared: &MemoState, key: &MemoKey, response: &ChatResponse) {
    match store_call("memo.put", shared.timeout, shared.store.put(key, response)).await {
        Ok(()) => {}
        // A response over the store's size bound is policy, not an outage.
        Err(error) if error.kind == StoreErrorKind::TooLarge => tracing::debug!(
            event = "memo_not_stored",
            scope = %key.scope_key(),
            reason = %error,
            "memo: response not stored: {error}"
        ),
        Err(error) => {
            shared.breaker.failed(&error);
            degraded("put", key, &error);
        }
    }
}
