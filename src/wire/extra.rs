//! Which of a request's pass-through fields a client of one format sends on: every one
//! written in its own format, and of another format's only those its format has too.

use serde_json::Value;

use crate::{GenerationParams, WireFormat};

/// What a client of one format knows of the pass-through fields.
pub(crate) struct PassThrough {
    /// Its format.
    pub(crate) format: WireFormat,
    /// Whether untagged fields (set by hand) are sent like its own format's, or only
    /// where its format has them.
    pub(crate) untagged_are_own: bool,
    /// The fields the client writes itself (or reads into the body): never passed on.
    pub(crate) set_here: &'static [&'static str],
    /// Every top-level field of its format.
    pub(crate) fields: &'static [&'static str],
}

impl PassThrough {
    /// The fields of `p.extra` to send, in key order; those left out are named in a
    /// `params_not_sent` debug event.
    pub(crate) fn sent<'a>(&self, p: &'a GenerationParams) -> Vec<(&'a String, &'a Value)> {
        let foreign = match p.extra_format {
            Some(format) => format != self.format,
            None => !self.untagged_are_own,
        };
        let mut dropped = Vec::new();
        let mut out = Vec::with_capacity(p.extra.len());
        for (k, v) in &p.extra {
            if self.set_here.contains(&k.as_str()) {
                continue;
            }
            if foreign && !self.fields.contains(&k.as_str()) {
                dropped.push(k.as_str());
            } else {
                out.push((k, v));
            }
        }
        if !dropped.is_empty() {
            tracing::debug!(
                event = "params_not_sent",
                format = ?self.format,
                fields = ?dropped,
                "fields the upstream's format does not have are not sent"
            );
        }
        out
    }
}
