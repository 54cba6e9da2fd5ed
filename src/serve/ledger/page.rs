//! `GET /ui` and `GET /ui/sessions/{session}`: the ledger as a page a person reads.
//! Server-rendered HTML, its style in the binary (no CDN: it works offline), charts as
//! inline SVG with a text alternative, no script (the page refreshes itself every 30 s
//! with a `<meta>`); readable at a phone's width. Every figure says its scope and window.
//! The same book feeds it as the JSON, so the two always agree.

use std::fmt::Write;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::extract::{Path, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::book::{SessionView, TenantView, Totals};
use super::row::Row;
use crate::serve::Shared;

/// The overview's route.
pub(crate) const UI: &str = "/ui";
/// One session's page.
pub(crate) const UI_SESSION: &str = "/ui/sessions/{session}";

const STYLE: &str = include_str!("page.css");

/// `GET /ui` (`?sort=saving|cost`, else the newest sessions first).
pub(crate) async fn overview(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    if let Some(refused) = crate::serve::handler::refused(&shared, &request) {
        return refused;
    }
    shared.ledger.flush().await;
    let sort = super::http::query_value(request.uri().query(), "sort");
    let (tenants, sessions) = shared.ledger.read(|b| (b.tenants(), b.sessions()));
    html(
        StatusCode::OK,
        &overview_page(&tenants, sessions, sort.as_deref()),
    )
}

/// `GET /ui/sessions/{session}` (`?tenant=…`).
pub(crate) async fn session(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    request: Request,
) -> Response {
    if let Some(refused) = crate::serve::handler::refused(&shared, &request) {
        return refused;
    }
    shared.ledger.flush().await;
    let tenant = super::http::query_value(request.uri().query(), "tenant");
    let id = crate::serve::keys::session_id(&id).into_owned();
    let found = shared.ledger.read(|b| b.session(&id, tenant.as_deref()));
    match found.into_iter().next() {
        Some((view, rows)) => html(StatusCode::OK, &session_page(&view, &rows)),
        None => {
            let body = format!(
                "<p>The ledger holds no session <code>{}</code>. <a href=\"/ui\">All sessions</a></p>",
                escape(&id)
            );
            html(StatusCode::NOT_FOUND, &document("No such session", &body))
        }
    }
}

fn html(status: StatusCode, body: &str) -> Response {
    let mut out = (status, body.to_owned()).into_response();
    out.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    out
}

/// A whole page around `body`.
fn document(title: &str, body: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta http-equiv=\"refresh\" content=\"30\"><link rel=\"icon\" href=\"data:,\">\
         <title>{} · llm-context</title><style>{STYLE}</style></head>\
         <body><header><a href=\"/ui\">llm-context</a> · what the proxy saved</header><main>{body}</main>\
         <footer>Costs at the catalog's prices; pass-through is the same requests sent unchanged, \
         modelled by the provider's cache rules and scaled by its reported usage. \
         JSON: <a href=\"/llm-context/ledger/sessions\">/llm-context/ledger/sessions</a></footer>\
         </body></html>\n",
        escape(title)
    )
}

fn overview_page(
    tenants: &[TenantView],
    mut sessions: Vec<SessionView>,
    sort: Option<&str>,
) -> String {
    let mut body = String::new();
    let window =
        tenants
            .iter()
            .filter(|t| t.totals.requests > 0)
            .fold(None, |w: Option<(u64, u64)>, t| {
                Some(w.map_or((t.totals.from_ms, t.totals.to_ms), |(a, b)| {
                    (a.min(t.totals.from_ms), b.max(t.totals.to_ms))
                }))
            });
    let _ = write!(
        body,
        "<h1>Savings by tenant</h1><p class=\"scope\">Every managed request since this server \
         started{}. Held in memory.</p>",
        window.map_or_else(String::new, |(a, b)| format!(", {}", span(a, b)))
    );
    if tenants.is_empty() {
        body.push_str("<p>No request yet.</p>");
        return document("Savings", &body);
    }
    body.push_str(
        "<div class=\"table\"><table id=\"tenants\"><caption>Per tenant, since the server \
         started</caption><thead><tr><th scope=\"col\">Tenant</th><th scope=\"col\">Requests</th>\
         <th scope=\"col\">Tokens sent by clients</th><th scope=\"col\">Tokens sent upstream</th>\
         <th scope=\"col\">Actual cost</th><th scope=\"col\">Pass-through cost</th>\
         <th scope=\"col\">Saving</th><th scope=\"col\">Cache read share</th>\
         <th scope=\"col\">Cache read : write</th><th scope=\"col\">Passed through unmanaged</th>\
         <th scope=\"col\">Provenance</th></tr></thead><tbody>",
    );
    for t in tenants {
        let x = &t.totals;
        let _ = write!(
            body,
            "<tr class=\"tenant\" data-tenant=\"{tenant}\"><th scope=\"row\">{tenant}</th>\
             <td>{}</td><td>{}</td><td>{}</td><td data-usd=\"{}\">{}</td><td data-usd=\"{}\">{}</td>{}\
             <td>{}</td><td>{}</td><td>{}</td><td class=\"wrap\">{}</td></tr>",
            x.requests,
            count(x.client_tokens),
            count(x.sent_tokens),
            x.actual_usd,
            usd(x.actual_usd),
            x.passthrough_usd,
            usd(x.passthrough_usd),
            saving_cell(x),
            x.cache_read_share()
                .map_or("–".into(), |s| format!("{:.1}%", s * 100.0)),
            x.cache_read_write_ratio()
                .map_or("–".into(), |r| format!("{r:.1} : 1")),
            t.passed_through,
            provenance(x),
            tenant = escape(&t.tenant),
        );
    }
    body.push_str("</tbody></table></div>");

    match sort {
        Some("saving") => {
            sessions.sort_by(|a, b| b.totals.saving_usd().total_cmp(&a.totals.saving_usd()))
        }
        Some("cost") => {
            sessions.sort_by(|a, b| b.totals.actual_usd.total_cmp(&a.totals.actual_usd))
        }
        _ => {}
    }
    let flagged = sessions
        .iter()
        .filter(|s| s.costlier_than_passthrough)
        .count();
    let _ = write!(
        body,
        "<h2>Sessions</h2><p class=\"scope\">The newest {} sessions held (of at most {}); \
         each since its first request held. Sort: <a href=\"/ui\">newest</a> · \
         <a href=\"/ui?sort=saving\">by saving</a> · <a href=\"/ui?sort=cost\">by cost</a>.{}</p>",
        sessions.len(),
        super::MAX_SESSIONS,
        if flagged > 0 {
            format!(
                " <strong class=\"loss\">{flagged} costlier than pass-through over their newest {} requests.</strong>",
                super::GUARD_WINDOW
            )
        } else {
            String::new()
        }
    );
    body.push_str(
        "<div class=\"table\"><table id=\"sessions\"><caption>Per session</caption><thead><tr>\
         <th scope=\"col\">Session</th><th scope=\"col\">Tenant</th><th scope=\"col\">Requests</th>\
         <th scope=\"col\">Window</th><th scope=\"col\">Actual cost</th>\
         <th scope=\"col\">Pass-through cost</th><th scope=\"col\">Saving</th>\
         <th scope=\"col\">Newest 20</th></tr></thead><tbody>",
    );
    for s in &sessions {
        let x = &s.totals;
        let _ = write!(
            body,
            "<tr class=\"session{}\" data-session=\"{session}\"><th scope=\"row\"><a href=\"{href}\">{session}</a></th>\
             <td>{}</td><td>{}</td><td>{}</td><td data-usd=\"{}\">{}</td><td data-usd=\"{}\">{}</td>{}<td>{}</td></tr>",
            if s.costlier_than_passthrough {
                " costlier"
            } else {
                ""
            },
            escape(&s.tenant),
            x.requests,
            span(x.from_ms, x.to_ms),
            x.actual_usd,
            usd(x.actual_usd),
            x.passthrough_usd,
            usd(x.passthrough_usd),
            saving_cell(x),
            if s.costlier_than_passthrough {
                "<span class=\"flag\">costlier than pass-through</span>"
            } else {
                "saving or even"
            },
            session = escape(&s.session),
            href = session_href(s),
        );
    }
    body.push_str("</tbody></table></div>");
    document("Savings", &body)
}

fn session_href(s: &SessionView) -> String {
    format!(
        "/ui/sessions/{}?tenant={}",
        percent(&s.session),
        percent(&s.tenant)
    )
}

fn session_page(s: &SessionView, rows: &[Row]) -> String {
    let x = &s.totals;
    let mut body = String::new();
    let _ = write!(
        body,
        "<h1>Session <code>{}</code></h1><p class=\"scope\">Tenant <strong>{}</strong>. {} \
         requests, {}; the charts and the list show the {} of them the ledger holds.</p>",
        escape(&s.session),
        escape(&s.tenant),
        x.requests,
        span(x.from_ms, x.to_ms),
        rows.len(),
    );
    if s.costlier_than_passthrough {
        let (a, p) = s.recent_usd();
        let _ = write!(
            body,
            "<p class=\"flag\">Costlier than pass-through: its newest {} priced requests cost {} \
             where sent unchanged they are modelled at {}.</p>",
            super::GUARD_WINDOW,
            usd(a),
            usd(p)
        );
    }
    let _ = write!(
        body,
        "<dl class=\"figures\"><div><dt>Actual cost</dt><dd id=\"actual\" data-usd=\"{}\">{}</dd></div>\
         <div><dt>Pass-through cost</dt><dd id=\"passthrough\" data-usd=\"{}\">{}</dd></div>\
         <div><dt>Saving</dt><dd id=\"saving\">{}</dd></div>\
         <div><dt>Cache read share</dt><dd>{}</dd></div><div><dt>Provenance</dt><dd>{}</dd></div></dl>",
        x.actual_usd,
        usd(x.actual_usd),
        x.passthrough_usd,
        usd(x.passthrough_usd),
        signed(x),
        x.cache_read_share()
            .map_or("–".into(), |s| format!("{:.1}%", s * 100.0)),
        provenance(x),
    );
    let n = rows.len();
    let series = |f: &dyn Fn(&Row) -> f64| rows.iter().map(f).collect::<Vec<f64>>();
    body.push_str(&chart(
        "tokens",
        "Prompt tokens per request",
        "estimated tokens",
        &[
            (
                "client",
                "sent by the client",
                series(&|r| r.client_tokens as f64),
            ),
            ("sent", "sent upstream", series(&|r| r.sent_tokens as f64)),
            (
                "read",
                "read from the cache (billed)",
                series(&|r| r.actual.cache_read as f64),
            ),
        ],
    ));
    let cumulative = |f: &dyn Fn(&Row) -> f64| {
        rows.iter()
            .scan(0.0, |sum, r| {
                *sum += f(r);
                Some(*sum)
            })
            .collect::<Vec<f64>>()
    };
    body.push_str(&chart(
        "cost",
        "Cumulative cost",
        "USD",
        &[
            (
                "actual",
                "actual",
                cumulative(&|r| r.actual_usd.unwrap_or(0.0)),
            ),
            (
                "passthrough",
                "pass-through",
                cumulative(&|r| r.passthrough_usd.unwrap_or(0.0)),
            ),
        ],
    ));
    let _ = write!(
        body,
        "<h2>Requests</h2><div class=\"table\"><table id=\"requests\"><caption>The {n} requests \
         held, oldest first</caption><thead><tr><th scope=\"col\">#</th><th scope=\"col\">Time</th>\
         <th scope=\"col\">Model</th><th scope=\"col\">Status</th><th scope=\"col\">Client tokens</th>\
         <th scope=\"col\">Sent tokens</th><th scope=\"col\">Cache read</th><th scope=\"col\">Cache written</th>\
         <th scope=\"col\">Actual</th><th scope=\"col\">Pass-through</th><th scope=\"col\">What was done</th>\
         <th scope=\"col\">Provenance</th><th scope=\"col\">Added</th></tr></thead><tbody>"
    );
    for (i, r) in rows.iter().enumerate() {
        let _ = write!(
            body,
            "<tr class=\"request\"><th scope=\"row\">{}</th><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.2} ms</td></tr>",
            i + 1,
            time(r.at_ms),
            escape(&r.model),
            r.status,
            count(r.client_tokens),
            count(r.sent_tokens),
            count(r.actual.cache_read),
            count(r.actual.cache_write_5m + r.actual.cache_write_1h),
            r.actual_usd.map_or("unpriced".into(), usd),
            r.passthrough_usd.map_or("unpriced".into(), usd),
            done(r),
            r.provenance.as_str(),
            r.added_ms,
        );
    }
    body.push_str("</tbody></table></div>");
    document(&format!("Session {}", s.session), &body)
}

/// A line chart of `series` over the requests, with its figures as a table for those who
/// do not see it.
fn chart(id: &str, title: &str, unit: &str, series: &[(&str, &str, Vec<f64>)]) -> String {
    const W: f64 = 640.0;
    const H: f64 = 220.0;
    const PAD: f64 = 36.0;
    let n = series.first().map_or(0, |s| s.2.len());
    let top = series
        .iter()
        .flat_map(|s| s.2.iter().copied())
        .fold(0.0_f64, f64::max)
        .max(f64::MIN_POSITIVE);
    let x = |i: usize| {
        PAD + (W - 2.0 * PAD)
            * if n > 1 {
                i as f64 / (n - 1) as f64
            } else {
                0.5
            }
    };
    let y = |v: f64| H - PAD - (H - 2.0 * PAD) * v / top;
    let mut svg = format!(
        "<figure class=\"chart\"><figcaption>{title} ({unit})</figcaption>\
         <svg id=\"chart-{id}\" viewBox=\"0 0 {W} {H}\" role=\"img\" aria-labelledby=\"chart-{id}-t\">\
         <title id=\"chart-{id}-t\">{title}, one point per request; the figures are in the table below</title>\
         <line class=\"axis\" x1=\"{PAD}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\"/>\
         <text class=\"tick\" x=\"4\" y=\"{PAD}\">{}</text><text class=\"tick\" x=\"4\" y=\"{b}\">0</text>",
        short(top),
        b = H - PAD,
        r = W - PAD,
    );
    for (k, (name, _, values)) in series.iter().enumerate() {
        let points: Vec<String> = values
            .iter()
            .enumerate()
            .map(|(i, v)| format!("{:.1},{:.1}", x(i), y(*v)))
            .collect();
        let _ = write!(
            svg,
            "<polyline class=\"s{k}\" data-series=\"{name}\" points=\"{}\"/>",
            points.join(" ")
        );
        for (i, v) in values.iter().enumerate() {
            let _ = write!(
                svg,
                "<circle class=\"point s{k}\" data-series=\"{name}\" data-request=\"{}\" data-value=\"{v}\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"2.5\"/>",
                i + 1,
                x(i),
                y(*v)
            );
        }
    }
    svg.push_str("</svg><p class=\"legend\">");
    for (k, (_, label, _)) in series.iter().enumerate() {
        let _ = write!(svg, "<span class=\"key s{k}\">{label}</span> ");
    }
    let _ = write!(
        svg,
        "</p><details><summary>{title} as a table</summary><div class=\"table\"><table>\
         <thead><tr><th scope=\"col\">#</th>"
    );
    for (_, label, _) in series {
        let _ = write!(svg, "<th scope=\"col\">{label}</th>");
    }
    svg.push_str("</tr></thead><tbody>");
    for i in 0..n {
        let _ = write!(svg, "<tr><th scope=\"row\">{}</th>", i + 1);
        for (_, _, values) in series {
            let _ = write!(svg, "<td>{}</td>", short(values[i]));
        }
        svg.push_str("</tr>");
    }
    svg.push_str("</tbody></table></div></details></figure>");
    svg
}

fn done(r: &Row) -> String {
    let e = &r.edits;
    let mut parts = Vec::new();
    for (n, what) in [
        (e.removed_messages, "messages removed"),
        (e.cleared, "results cleared"),
        (e.offloaded, "results offloaded"),
        (e.thinking_dropped, "thinking blocks dropped"),
        (e.compacted, "messages compacted"),
    ] {
        if n > 0 {
            parts.push(format!("{n} {what}"));
        }
    }
    if e.memo_hit {
        parts.push("answered from the memo".into());
    }
    if e.guard_held {
        parts.push("guard: only what the window forced".into());
    }
    if parts.is_empty() {
        "nothing edited".into()
    } else {
        parts.join(", ")
    }
}

fn saving_cell(t: &Totals) -> String {
    let class = if t.saving_usd() < 0.0 { "loss" } else { "gain" };
    format!(
        "<td class=\"{class}\" data-usd=\"{}\">{}</td>",
        t.saving_usd(),
        signed(t)
    )
}

fn signed(t: &Totals) -> String {
    let s = t.saving_usd();
    let sign = if s < 0.0 { "−" } else { "+" };
    let pct = t
        .saving_percent()
        .map_or(String::new(), |p| format!(" ({sign}{:.1}%)", p.abs()));
    format!("{sign}{}{pct}", usd(s.abs()))
}

fn provenance(t: &Totals) -> &'static str {
    t.provenance.map_or("–", |p| p.as_str())
}

/// Dollars to the cent from $100, to the hundredth of a cent from one cent, else to six
/// places: a session of a few small calls still shows its figures.
fn usd(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("${v:.2}")
    } else if v.abs() >= 0.01 || v == 0.0 {
        format!("${v:.4}")
    } else {
        format!("${v:.6}")
    }
}

/// `n` with its thousands grouped: `1,234,567`.
fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn short(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if v >= 1.0 || v == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.4}")
    }
}

/// `07 Dec 2026 06:38:00 GMT`: the HTTP date without its weekday.
fn time(ms: u64) -> String {
    let date = httpdate::fmt_http_date(SystemTime::UNIX_EPOCH + Duration::from_millis(ms));
    date.split_once(", ")
        .map_or(date.clone(), |(_, rest)| rest.to_owned())
}

/// A window, its date said once when both ends share it.
fn span(from: u64, to: u64) -> String {
    let (a, b) = (time(from), time(to));
    match (a.rsplit_once(' '), b.rsplit_once(' ')) {
        (Some((a_day, _)), Some((b_day, _))) if a_day.get(..11) == b_day.get(..11) => {
            let clock = |t: &str| t.get(12..20).unwrap_or_default().to_owned();
            format!("{}, {} – {} GMT", &a[..11], clock(&a), clock(&b))
        }
        _ => format!("{a} – {b}"),
    }
}

/// Text for HTML, in an element or an attribute.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A path segment or query value, percent-encoded.
fn percent(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_dates_without_weekdays_and_a_window_says_its_date_once() {
        // 2026-12-07 06:38:05 UTC.
        let at = 1_796_625_485_000;
        assert_eq!(time(at), "07 Dec 2026 06:38:05 GMT");
        assert_eq!(
            span(at, at + 60_000),
            "07 Dec 2026, 06:38:05 – 06:39:05 GMT"
        );
        assert_eq!(
            span(at, at + 86_400_000),
            "07 Dec 2026 06:38:05 GMT – 08 Dec 2026 06:38:05 GMT"
        );
    }

    #[test]
    fn money_keeps_its_small_figures() {
        assert_eq!(usd(1234.567), "$1234.57");
        assert_eq!(usd(0.5), "$0.5000");
        assert_eq!(usd(0.000_88), "$0.000880");
        assert_eq!(usd(0.0), "$0.0000");
    }

    #[test]
    fn text_is_escaped_and_counts_are_grouped() {
        assert_eq!(
            escape("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(percent("a b/c"), "a%20b%2Fc");
    }

    #[test]
    fn a_chart_has_one_point_per_request_in_each_series_and_a_table() {
        let svg = chart(
            "t",
            "T",
            "u",
            &[
                ("a", "A", vec![1.0, 2.0, 3.0]),
                ("b", "B", vec![0.0, 0.0, 0.0]),
            ],
        );
        assert_eq!(svg.matches("<circle class=\"point s0\"").count(), 3);
        assert_eq!(svg.matches("<circle class=\"point s1\"").count(), 3);
        assert_eq!(svg.matches("<tr><th scope=\"row\">").count(), 3);
        // The largest value is at the top, zero on the axis.
        assert!(svg.contains("cx=\"604.0\" cy=\"36.0\""));
        assert!(svg.contains("cx=\"36.0\" cy=\"184.0\""));
    }
}
