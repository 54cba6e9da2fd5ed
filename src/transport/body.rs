//! A request body that may be sent as pieces of other buffers.
//!
//! ```
//! use bytes::Bytes;
//! use llm_context::transport::RequestBody;
//!
//! // A client's body, and the same body with one span replaced: the kept spans are
//! // slices of the client's buffer (shared, not copied), only the edit is new.
//! let client = Bytes::from_static(br#"{"a":"old","b":2}"#);
//! let body = RequestBody::from_pieces([client.slice(..5), Bytes::from("\"new\""), client.slice(10..)]);
//! assert_eq!(body.len(), client.len());
//! assert_eq!(body.pieces().len(), 3);
//! assert_eq!(body.to_bytes(), Bytes::from_static(br#"{"a":"new","b":2}"#));
//! ```
//!
//! A proxy that forwards a 600 KB transcript with one message edited should not copy the
//! other 599 KB: [`RequestBody`] holds the body as [`Bytes`] pieces, each a slice of a
//! buffer already in memory or a small new one, and sends each as its own frame of an
//! [`http_body::Body`] whose size is known exactly (so HTTP/1 sends `Content-Length`, not
//! chunks). A body built from one buffer is one piece, as before.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};

/// The body of an [`HttpRequest`](super::HttpRequest): one buffer, or several pieces sent
/// in order. Cloning shares the pieces (no copy).
#[derive(Clone, Default)]
pub struct RequestBody {
    /// The pieces still to send, none empty; `pieces[next..]` once polling began.
    pieces: Vec<Bytes>,
    next: usize,
    /// The bytes in `pieces[next..]`.
    len: usize,
}

impl RequestBody {
    /// A body of `pieces`, in order (empty pieces are left out).
    pub fn from_pieces(pieces: impl IntoIterator<Item = Bytes>) -> Self {
        let pieces: Vec<Bytes> = pieces.into_iter().filter(|p| !p.is_empty()).collect();
        let len = pieces.iter().map(Bytes::len).sum();
        Self {
            pieces,
            next: 0,
            len,
        }
    }

    /// The body's length in bytes (what is left of it, once sending began).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the body has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The pieces, in order.
    pub fn pieces(&self) -> &[Bytes] {
        &self.pieces[self.next..]
    }

    /// The body as one buffer: the piece itself when there is one (no copy), else the
    /// pieces copied into one.
    pub fn to_bytes(&self) -> Bytes {
        match self.pieces() {
            [] => Bytes::new(),
            [one] => one.clone(),
            many => {
                let mut out = BytesMut::with_capacity(self.len);
                for piece in many {
                    out.extend_from_slice(piece);
                }
                out.freeze()
            }
        }
    }

    /// Whether the body's bytes are `bytes`, compared piece by piece (no copy).
    pub fn eq_bytes(&self, bytes: &[u8]) -> bool {
        if bytes.len() != self.len {
            return false;
        }
        let mut at = 0;
        self.pieces().iter().all(|piece| {
            let same = bytes[at..at + piece.len()] == piece[..];
            at += piece.len();
            same
        })
    }
}

impl std::fmt::Debug for RequestBody {
    /// The length and the number of pieces, never the bytes (a body carries prompts).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestBody")
            .field("len", &self.len)
            .field("pieces", &self.pieces().len())
            .finish()
    }
}

impl From<Bytes> for RequestBody {
    fn from(bytes: Bytes) -> Self {
        Self::from_pieces([bytes])
    }
}

impl From<Vec<u8>> for RequestBody {
    fn from(bytes: Vec<u8>) -> Self {
        Self::from(Bytes::from(bytes))
    }
}

impl From<String> for RequestBody {
    fn from(text: String) -> Self {
        Self::from(Bytes::from(text))
    }
}

impl From<&'static str> for RequestBody {
    fn from(text: &'static str) -> Self {
        Self::from(Bytes::from_static(text.as_bytes()))
    }
}

impl http_body::Body for RequestBody {
    type Data = Bytes;
    type Error = Infallible;

    /// Each piece as its own frame: a buffer of many slices written at once has had
    /// vectored-write bugs in HTTP stacks, and a frame per piece costs nothing more.
    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        let this = &mut *self;
        let Some(piece) = this.pieces.get_mut(this.next) else {
            return Poll::Ready(None);
        };
        let piece = std::mem::take(piece);
        this.next += 1;
        this.len -= piece.len();
        Poll::Ready(Some(Ok(http_body::Frame::data(piece))))
    }

    fn is_end_stream(&self) -> bool {
        self.len == 0
    }

    /// Exact, so that HTTP/1 sends `Content-Length` rather than chunks.
    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.len as u64)
    }
}

impl From<RequestBody> for reqwest::Body {
    /// One piece as a buffer (which reqwest can resend), several as a body of frames.
    fn from(body: RequestBody) -> Self {
        match body.pieces() {
            [] => reqwest::Body::from(Bytes::new()),
            [one] => reqwest::Body::from(one.clone()),
            _ => reqwest::Body::wrap(body),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body::Body as _;

    #[tokio::test]
    async fn pieces_are_sent_in_order_one_frame_each_with_an_exact_length() {
        let base = Bytes::from_static(b"0123456789");
        let body = RequestBody::from_pieces([
            base.slice(..3),
            Bytes::new(),
            Bytes::from("ab"),
            base.slice(7..),
        ]);
        assert_eq!(body.len(), 8);
        assert_eq!(body.pieces().len(), 3, "the empty piece is left out");
        assert!(body.eq_bytes(b"012ab789"));
        assert!(!body.eq_bytes(b"012ab788"));
        assert!(!body.eq_bytes(b"012ab78"));
        let mut body = body;
        let mut frames = Vec::new();
        let mut left = 8;
        while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await
        {
            let data = frame.unwrap().into_data().unwrap();
            left -= data.len();
            assert_eq!(body.size_hint().exact(), Some(left as u64));
            frames.push(data.to_vec());
        }
        assert_eq!(frames, [b"012".to_vec(), b"ab".to_vec(), b"789".to_vec()]);
        assert!(body.is_end_stream());
    }

    #[test]
    fn one_piece_is_its_buffer_and_many_are_joined() {
        let one = Bytes::from("whole");
        let body = RequestBody::from(one.clone());
        assert_eq!(
            body.to_bytes().as_ptr(),
            one.as_ptr(),
            "no copy of one piece"
        );
        let many = RequestBody::from_pieces([Bytes::from("a"), Bytes::from("bc")]);
        assert_eq!(many.to_bytes(), Bytes::from("abc"));
        assert_eq!(RequestBody::default().to_bytes(), Bytes::new());
        assert!(format!("{many:?}").contains("len: 3"));
    }
}
