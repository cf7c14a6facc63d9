//! `text/event-stream` read as it arrives, for the vendors that stream over SSE (DashScope,
//! MiniMax): body pieces are pushed in; every block ended by a blank line comes out as an
//! [`Event`] with its `event:` name, its `data:` lines (joined by `\n`) and DashScope's
//! `:HTTP_STATUS/<n>` comment. That comment is why this is not a general SSE library: SSE
//! parsers drop comments, and DashScope puts an error event's HTTP status there. `id:`,
//! `retry:` and other comments are ignored.

/// One server-sent event.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Event {
    /// `event:` name, if any.
    pub name: Option<String>,
    /// The status from a `:HTTP_STATUS/<n>` comment (DashScope), if any.
    pub http_status: Option<u16>,
    /// The `data:` lines joined by `\n`.
    pub data: String,
}

/// Splits a growing event stream into events.
#[derive(Debug, Default)]
pub struct SseReader {
    pending: Vec<u8>,
}

impl SseReader {
    /// Adds the next body piece; returns the events it completed, in order.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<Event> {
        self.pending.extend(bytes.iter().filter(|&&b| b != b'\r'));
        let mut events = Vec::new();
        while let Some(end) = self.pending.windows(2).position(|w| w == b"\n\n") {
            let block: Vec<u8> = self.pending.drain(..end + 2).collect();
            events.extend(parse_block(&String::from_utf8_lossy(&block)));
        }
        events
    }

    /// The last event when the stream ended without a blank line after it.
    pub fn finish(self) -> Option<Event> {
        parse_block(&String::from_utf8_lossy(&self.pending))
    }
}

/// The event of one block (`None` for a block of comments or blank lines only).
fn parse_block(block: &str) -> Option<Event> {
    let mut event = Event::default();
    let mut data = Vec::new();
    for line in block.lines() {
        if let Some(v) = line.strip_prefix("data:") {
            data.push(v.strip_prefix(' ').unwrap_or(v));
        } else if let Some(v) = line.strip_prefix("event:") {
            event.name = Some(v.trim().to_owned());
        } else if let Some(v) = line.strip_prefix(":HTTP_STATUS/") {
            event.http_status = v.trim().parse().ok();
        }
    }
    event.data = data.join("\n");
    (!event.data.is_empty() || event.name.is_some()).then_some(event)
}

/// Every event of a whole body.
pub fn parse_all(body: &[u8]) -> Vec<Event> {
    let mut reader = SseReader::default();
    let mut events = reader.push(body);
    events.extend(reader.finish());
    events
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_come_out_whatever_the_slicing() {
        let body = b"id:1\r\nevent:result\r\n:HTTP_STATUS/200\r\ndata:{\"a\":1}\r\n\r\nevent:error\n:HTTP_STATUS/429\ndata: {\"code\":\"Throttling\"}\n\ndata:tail";
        let whole = parse_all(body);
        assert_eq!(whole.len(), 3);
        assert_eq!(whole[0].name.as_deref(), Some("result"));
        assert_eq!(whole[0].http_status, Some(200));
        assert_eq!(whole[1].data, "{\"code\":\"Throttling\"}");
        assert_eq!(whole[2].data, "tail");
        for step in [1, 2, 5, 17] {
            let mut reader = SseReader::default();
            let mut events = Vec::new();
            for piece in body.chunks(step) {
                events.extend(reader.push(piece));
            }
            events.extend(reader.finish());
            assert_eq!(events, whole, "{step} bytes at a time");
        }
    }
}
