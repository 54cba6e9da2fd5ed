//! `llm-context ledger --ledger sqlite:PATH [--json]`: a ledger kept by `serve` on disk, as
//! a table per tenant and per session (or as the JSON `GET /llm-context/ledger/sessions`
//! answers).

use std::path::{Path, PathBuf};

use clap::Args;
use llm_context::serve::ledger::{LedgerFile, SessionView, Totals};

use super::{Exit, emit};

#[derive(Args, Debug)]
pub(crate) struct LedgerArgs {
    /// The ledger: `sqlite:PATH`, as `serve --ledger` kept it.
    #[arg(long, value_name = "sqlite:PATH")]
    ledger: String,
    /// Print the overview as JSON (the shape of `GET /llm-context/ledger/sessions`).
    #[arg(long)]
    json: bool,
}

/// The ledger `spec` names (`sqlite:PATH`, a relative path from `folder`), opened.
pub(crate) fn open(spec: &str, folder: &Path) -> Result<LedgerFile, Exit> {
    let Some(path) = spec.strip_prefix("sqlite:").filter(|p| !p.is_empty()) else {
        return Err(Exit::bad_input(format!(
            "ledger {spec:?}: expected sqlite:PATH (the only kind of ledger file there is)"
        )));
    };
    let path = PathBuf::from(path);
    let path = if path.is_relative() {
        folder.join(path)
    } else {
        path
    };
    LedgerFile::open(&path).map_err(|e| Exit::bad_input(e.to_string()))
}

pub(crate) fn run(args: &LedgerArgs) -> Result<u8, Exit> {
    if let Some(path) = args.ledger.strip_prefix("sqlite:")
        && !Path::new(path).exists()
    {
        return Err(Exit::bad_input(format!("ledger {path}: no such file")));
    }
    let file = open(&args.ledger, Path::new("."))?;
    if args.json {
        let mut text = serde_json::to_string_pretty(&file.overview_json())
            .map_err(|e| Exit::internal(e.to_string()))?;
        text.push('\n');
        return emit(&text, 0);
    }
    emit(&table(&file), 0)
}

fn table(file: &LedgerFile) -> String {
    let mut rows = vec![[
        "tenant".to_owned(),
        "session".into(),
        "requests".into(),
        "actual $".into(),
        "pass-through $".into(),
        "saving".into(),
        "provenance".into(),
    ]];
    let line = |tenant: &str, session: &str, t: &Totals, flag: bool| {
        [
            tenant.to_owned(),
            session.to_owned(),
            t.requests.to_string(),
            format!("{:.4}", t.actual_usd),
            format!("{:.4}", t.passthrough_usd),
            format!(
                "{:+.4}{}{}",
                t.saving_usd(),
                t.saving_percent()
                    .map_or(String::new(), |p| format!(" ({p:+.1}%)")),
                if flag { " COSTLIER" } else { "" }
            ),
            t.provenance.map_or("-", |p| p.as_str()).to_owned(),
        ]
    };
    for t in file.tenants() {
        rows.push(line(&t.tenant, "(all)", &t.totals, false));
    }
    let sessions: Vec<SessionView> = file.sessions();
    for s in &sessions {
        rows.push(line(
            &s.tenant,
            &short(&s.session),
            &s.totals,
            s.costlier_than_passthrough,
        ));
    }
    let widths: Vec<usize> = (0..7)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in &rows {
        let cells: Vec<String> = r
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(c, (cell, w))| {
                if (2..6).contains(&c) {
                    format!("{cell:>w$}")
                } else {
                    format!("{cell:<w$}")
                }
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    if file.tenants().is_empty() {
        out.push_str("(no request yet)\n");
    }
    out
}

/// A session id cut to 40 characters for the table (the JSON has it whole).
fn short(id: &str) -> String {
    if id.chars().count() <= 40 {
        return id.to_owned();
    }
    let head: String = id.chars().take(39).collect();
    format!("{head}…")
}
