//! A body written as spans of the client's bytes and the few bytes written anew.
//!
//! A proxied body is mostly the client's own bytes: the writer names the spans it keeps
//! ([`Pieces::keep`]) and writes the rest ([`std::io::Write`]); adjacent kept spans are
//! merged, and a separator the client's bytes already hold between two kept spans is
//! kept with them ([`Pieces::comma`]), so that an unedited run of messages is one slice.
//! [`Pieces::finish`] makes each span a [`Bytes`] slice, the kept ones of the client's
//! buffer (shared, never copied) and the written ones of one new buffer.

use std::ops::Range;

use bytes::Bytes;

use crate::transport::RequestBody;

/// A span of the body being written.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Span {
    /// Of the client's bytes.
    Kept(Range<usize>),
    /// Of the bytes written here.
    Own(Range<usize>),
}

/// A body being written over `base`, the client's bytes.
pub(crate) struct Pieces<'a> {
    base: &'a Bytes,
    own: Vec<u8>,
    spans: Vec<Span>,
}

impl<'a> Pieces<'a> {
    /// An empty body over `base`.
    pub(crate) fn new(base: &'a Bytes) -> Self {
        Self {
            base,
            own: Vec::with_capacity(1024),
            spans: Vec::new(),
        }
    }

    /// `range` of the client's bytes, next.
    pub(crate) fn keep(&mut self, range: Range<usize>) {
        if range.is_empty() {
            return;
        }
        if let Some(Span::Kept(last)) = self.spans.last_mut()
            && last.end == range.start
        {
            last.end = range.end;
            return;
        }
        self.spans.push(Span::Kept(range));
    }

    /// A comma between two items of an array or object, the next starting at `next` in
    /// the client's bytes (`None`: written here). When the body so far ends with a kept
    /// span and the client's bytes between it and `next` are one comma and whitespace,
    /// those bytes are kept (the two spans become one); else a comma is written.
    pub(crate) fn comma(&mut self, next: Option<usize>) {
        if let (Some(Span::Kept(last)), Some(next)) = (self.spans.last(), next)
            && let Some(between) = self.base.get(last.end..next)
            && between.iter().filter(|&&b| b == b',').count() == 1
            && between
                .iter()
                .all(|b| matches!(b, b',' | b' ' | b'\n' | b'\r' | b'\t'))
        {
            self.keep(last.end..next);
            return;
        }
        self.push(b",");
    }

    /// `bytes` written here, next.
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let start = self.own.len();
        self.own.extend_from_slice(bytes);
        if let Some(Span::Own(last)) = self.spans.last_mut()
            && last.end == start
        {
            last.end = self.own.len();
            return;
        }
        self.spans.push(Span::Own(start..self.own.len()));
    }

    /// The body: each span a slice of the client's buffer or of the one written here.
    pub(crate) fn finish(self) -> RequestBody {
        let own = Bytes::from(self.own);
        let base = self.base;
        RequestBody::from_pieces(self.spans.into_iter().map(|span| match span {
            Span::Kept(r) => base.slice(r),
            Span::Own(r) => own.slice(r),
        }))
    }
}

impl std::io::Write for Pieces<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.push(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(body: &RequestBody) -> Vec<String> {
        body.pieces()
            .iter()
            .map(|p| String::from_utf8(p.to_vec()).unwrap())
            .collect()
    }

    #[test]
    fn adjacent_kept_spans_and_the_clients_own_separators_become_one_slice() {
        let base = Bytes::from_static(b"[1, 2 ,\n3,,4]");
        let mut w = Pieces::new(&base);
        w.push(b"[");
        w.keep(1..2);
        w.comma(Some(4));
        w.keep(4..5);
        w.comma(Some(8));
        w.keep(8..9);
        // Two commas between: not a separator the writer would write; one is written.
        w.comma(Some(11));
        w.keep(11..12);
        w.comma(None);
        w.push(b"5]");
        let body = w.finish();
        assert_eq!(pieces(&body), ["[", "1, 2 ,\n3", ",", "4", ",5]"]);
        // The kept span is the client's buffer, not a copy.
        assert_eq!(body.pieces()[1].as_ptr(), base[1..].as_ptr());
    }

    #[test]
    fn a_comma_after_written_bytes_is_written_and_empty_spans_are_nothing() {
        let base = Bytes::from_static(b"a,b");
        let mut w = Pieces::new(&base);
        w.keep(0..0);
        w.push(b"");
        std::io::Write::write_all(&mut w, b"x").unwrap();
        w.comma(Some(2));
        w.keep(2..3);
        assert_eq!(pieces(&w.finish()), ["x,", "b"]);
    }
}
