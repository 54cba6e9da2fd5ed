//! The ledger as JSON: `GET /llm-context/ledger/sessions` (every tenant and every session
//! held) and `GET /llm-context/ledger/sessions/{session}` (one session and its requests),
//! under the access rule of `/metrics`. Not under `/v1/`, which belongs to the providers.

use std::sync::Arc;

use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::book::{Book, SessionView, TenantView, Totals};
use super::row::Row;
use super::{MAX_REQUESTS, MAX_SESSIONS};
use crate::serve::Shared;

/// The overview's route.
pub(crate) const SESSIONS: &str = "/llm-context/ledger/sessions";
/// One session's route.
pub(crate) const SESSION: &str = "/llm-context/ledger/sessions/{session}";

/// What the figures cover, said with each answer.
pub(crate) fn scope() -> String {
    format!(
        "managed requests since this server started, in memory: each tenant's totals since \
         then; the newest {MAX_SESSIONS} sessions and {MAX_REQUESTS} requests"
    )
}

/// `GET /llm-context/ledger/sessions`.
pub(crate) async fn sessions(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    if let Some(refused) = super::super::handler::refused(&shared, &request) {
        return refused;
    }
    axum::Json(overview(&shared).await).into_response()
}

/// The overview, as JSON.
pub(crate) async fn overview(shared: &Shared) -> Value {
    shared.ledger.flush().await;
    shared
        .ledger
        .read(|b| overview_json(b, shared.ledger.scope()))
}

/// The overview of `book`, whose figures cover `scope`.
pub(crate) fn overview_json(book: &Book, scope: &str) -> Value {
    let (tenants, sessions) = (book.tenants(), book.sessions());
    json!({
        "scope": scope,
        "tenants": tenants.iter().map(tenant_json).collect::<Vec<_>>(),
        "sessions": sessions.iter().map(session_json).collect::<Vec<_>>(),
    })
}

/// `GET /llm-context/ledger/sessions/{session}`: 404 when the ledger holds no such session.
pub(crate) async fn session(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    request: Request,
) -> Response {
    if let Some(refused) = super::super::handler::refused(&shared, &request) {
        return refused;
    }
    let tenant = query_value(request.uri().query(), "tenant");
    match one(&shared, &id, tenant.as_deref()).await {
        Some(found) => axum::Json(found).into_response(),
        None => not_found(&id),
    }
}

/// One session and its requests, as JSON; `None`: not held.
pub(crate) async fn one(shared: &Shared, id: &str, tenant: Option<&str>) -> Option<Value> {
    shared.ledger.flush().await;
    let id = crate::serve::keys::session_id(id);
    let found = shared.ledger.read(|b| b.session(&id, tenant));
    let (view, rows) = found.into_iter().next()?;
    let mut out = session_json(&view);
    out["scope"] = json!(shared.ledger.scope());
    out["requests"] = json!(rows.iter().map(row_json).collect::<Vec<_>>());
    Some(out)
}

/// The value of `name` in a query (`?tenant=…`, percent-encoded): which tenant's session,
/// when two use the same id; how the page sorts.
pub(crate) fn query_value(query: Option<&str>, name: &str) -> Option<String> {
    let value = query?
        .split('&')
        .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))?;
    let value = value.replace('+', " ");
    Some(
        percent_encoding::percent_decode_str(&value)
            .decode_utf8_lossy()
            .into_owned(),
    )
}

fn not_found(id: &str) -> Response {
    let shown = crate::serve::keys::session_id(id);
    let body = json!({"error": {"type": "not_found_error",
        "message": format!("the ledger holds no session {shown:?}")}});
    (StatusCode::NOT_FOUND, axum::Json(body)).into_response()
}

/// A total with the figures derived from it.
pub(crate) fn totals_json(t: &Totals) -> Value {
    let mut out = serde_json::to_value(t).unwrap_or(Value::Null);
    out["saving_usd"] = json!(t.saving_usd());
    out["saving_percent"] = json!(t.saving_percent());
    out["cache_read_share"] = json!(t.cache_read_share());
    out["cache_read_write_ratio"] = json!(t.cache_read_write_ratio());
    out["provenance"] = json!(t.provenance.map(|p| p.as_str()));
    out
}

fn tenant_json(t: &TenantView) -> Value {
    json!({"tenant": t.tenant, "passed_through": t.passed_through, "totals": totals_json(&t.totals)})
}

fn session_json(s: &SessionView) -> Value {
    let (actual, passthrough) = s.recent_usd();
    json!({
        "tenant": s.tenant,
        "session": s.session,
        "costlier_than_passthrough": s.costlier_than_passthrough,
        "recent": {"actual_usd": actual, "passthrough_usd": passthrough},
        "totals": totals_json(&s.totals),
    })
}

fn row_json(r: &Row) -> Value {
    let mut out = serde_json::to_value(r).unwrap_or(Value::Null);
    out["provenance"] = json!(r.provenance.as_str());
    out["saving_usd"] = json!(r.saving_usd());
    out
}
