//! Compressed request bodies on the managed routes: `Content-Encoding` `gzip`, `deflate`,
//! `br` and `zstd` (and any list of them, applied in order) are decoded before the body
//! is read, the decoded size held to the tenant's body limit as it grows.
//!
//! Agents compress their big bodies (Codex sends large requests with zstd; gateways pass
//! Claude Code's on gzipped). A compressed body is small on the wire and large in memory,
//! so the limit that matters is the decoded one: a decompression bomb stops at the limit
//! (413) with at most the limit decoded, never grows to fill memory, and the decoded
//! bytes take their share of the in-flight body budget as they grow (503 past it, like a
//! body that arrives large). An encoding the server does not know is 415. The client's
//! compressed bytes are kept beside the decoded ones: a body the stack leaves as it came
//! goes upstream as those bytes with the client's `Content-Encoding`, one it edited goes
//! uncompressed (the pass-through routes forward the bytes and the header as they came).

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, header};

use super::body::{Bodies, Read, Refused, take_more};

/// One content coding of a request body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Coding {
    Gzip,
    /// HTTP's `deflate`: a zlib stream (RFC 9110 §8.4.1.2).
    Deflate,
    Br,
    Zstd,
}

/// The codings `headers` declares, in the order they were applied (`identity` left out):
/// empty for a plain body, 415 for one the server cannot decode.
fn codings(headers: &HeaderMap) -> Result<Vec<Coding>, Refused> {
    let mut out = Vec::new();
    for value in headers.get_all(header::CONTENT_ENCODING) {
        let text = value.to_str().map_err(|_| unsupported("(not text)"))?;
        for name in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            out.push(match name.to_ascii_lowercase().as_str() {
                "identity" => continue,
                "gzip" | "x-gzip" => Coding::Gzip,
                "deflate" => Coding::Deflate,
                "br" => Coding::Br,
                "zstd" => Coding::Zstd,
                _ => return Err(unsupported(name)),
            });
        }
    }
    Ok(out)
}

fn unsupported(name: &str) -> Refused {
    Refused {
        status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
        message: format!(
            "the request body's content-encoding {name:?} is not one this server decodes \
             (gzip, deflate, br, zstd)"
        ),
    }
}

/// `read` decoded as `headers` declare, at most `limit` bytes, each coding undone in
/// turn (the last applied first). A plain body is returned as it is. The decoded bytes
/// take their share of `bodies`' budget as they grow and keep it with the body.
///
/// Decoding is CPU work proportional to the decoded size (tens of milliseconds for tens
/// of megabytes), so it runs on the blocking pool, off the server's event loop.
pub(crate) async fn decoded(
    bodies: &Bodies,
    headers: &HeaderMap,
    read: Read,
    limit: usize,
) -> Result<Read, Refused> {
    let codings = codings(headers)?;
    if codings.is_empty() {
        return Ok(read);
    }
    // The header as the client sent it (its lines joined), to send with its bytes.
    let lines: Vec<&[u8]> = headers
        .get_all(header::CONTENT_ENCODING)
        .iter()
        .map(|v| v.as_bytes())
        .collect();
    let value = axum::http::HeaderValue::from_bytes(&lines.join(&b", "[..]))
        .map_err(|_| unsupported("(not a header value)"))?;
    let budget = bodies.budget.clone();
    let task = tokio::task::spawn_blocking(move || {
        let Read {
            bytes: encoded,
            mut held,
            ..
        } = read;
        let mut bytes = encoded.clone();
        for coding in codings.into_iter().rev() {
            bytes = undo(coding, &bytes, limit, &budget, &mut held)?;
        }
        // Kept: sent as they came when the stack leaves the body as it is.
        Ok(Read {
            bytes,
            held,
            encoded: Some((encoded, value)),
        })
    });
    task.await.unwrap_or_else(|e| {
        Err(Refused {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: format!("decoding the request body failed: {e}"),
        })
    })
}

/// `bytes` with `coding` undone, at most `limit` bytes out; each 64 KiB decoded takes its
/// share of the budget into `held` first.
fn undo(
    coding: Coding,
    bytes: &[u8],
    limit: usize,
    budget: &std::sync::Arc<tokio::sync::Semaphore>,
    held: &mut tokio::sync::OwnedSemaphorePermit,
) -> Result<Bytes, Refused> {
    let corrupt = |e: std::io::Error| Refused {
        status: StatusCode::BAD_REQUEST,
        message: format!("the request body is not valid {coding:?} data: {e}").to_lowercase(),
    };
    let mut reader: Box<dyn std::io::Read + '_> = match coding {
        Coding::Gzip => Box::new(flate2::read::MultiGzDecoder::new(bytes)),
        Coding::Deflate => Box::new(flate2::read::ZlibDecoder::new(bytes)),
        Coding::Br => Box::new(brotli_decompressor::Decompressor::new(bytes, 64 * 1024)),
        Coding::Zstd => Box::new(zstd::stream::read::Decoder::with_buffer(bytes).map_err(corrupt)?),
    };
    const STEP: usize = 64 * 1024;
    let mut out: Vec<u8> = Vec::new();
    loop {
        if out.len() > limit {
            return Err(Refused {
                status: StatusCode::PAYLOAD_TOO_LARGE,
                message: format!(
                    "the request body decoded is over this server's limit of {limit} bytes"
                ),
            });
        }
        let start = out.len();
        take_more(budget, held, start + STEP)?;
        out.resize(start + STEP, 0);
        let n = read_some(&mut reader, &mut out[start..]).map_err(corrupt)?;
        out.truncate(start + n);
        if n == 0 {
            break;
        }
    }
    out.shrink_to_fit();
    Ok(Bytes::from(out))
}

/// One read into `buf`, retried when interrupted.
fn read_some(reader: &mut impl std::io::Read, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        match reader.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONTENT_ENCODING,
            HeaderValue::from_str(value).unwrap(),
        );
        h
    }

    #[test]
    fn codings_are_read_in_the_order_applied_and_identity_is_none() {
        assert_eq!(codings(&HeaderMap::new()).unwrap(), vec![]);
        assert_eq!(codings(&headers("identity")).unwrap(), vec![]);
        assert_eq!(
            codings(&headers("deflate, GZIP,br ,zstd")).unwrap(),
            vec![Coding::Deflate, Coding::Gzip, Coding::Br, Coding::Zstd]
        );
        let refused = codings(&headers("gzip, compress")).unwrap_err();
        assert_eq!(refused.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
        assert!(
            refused.message.contains("\"compress\""),
            "{}",
            refused.message
        );
    }
}
