//! hyper's own answers in OpenAI's error shape.
//!
//! A request hyper cannot parse never reaches the router: hyper answers it itself, before any
//! service runs, with a bare head and no body (`400 Bad Request` for a malformed request line
//! or header, `414 URI Too Long`, `431 Request Header Fields Too Large` past the head's buffer),
//! then closes the connection. hyper has no hook to shape that answer, so [`JsonErrors`] wraps
//! the connection's IO and recognises it on its way out: a whole response head alone in one
//! write, with status 400, 414 or 431 and no header but `content-length: 0`, `connection:
//! close` and `date` —
//! which no answer of the router is (each of its errors carries a JSON body). That head is
//! written instead as the same status with `{"error": {"message", "type", "param", "code"}}`,
//! saying what was wrong; hyper is told its own bytes were written. Everything else passes
//! through untouched (HTTP/2 frames never start like an HTTP/1 status line).

use std::{
    io,
    pin::Pin,
    task::{Context, Poll, ready},
};

use axum::http::StatusCode;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::error::ApiError;

/// A connection's IO whose hyper-made error answers carry an OpenAI-shaped body (module doc).
#[derive(Debug)]
pub(super) struct JsonErrors<IO> {
    inner: IO,
    /// A replacement being written: its bytes, how many went out, and how many of hyper's
    /// bytes it stands for.
    pending: Option<(Vec<u8>, usize, usize)>,
}

impl<IO> JsonErrors<IO> {
    pub(super) fn new(inner: IO) -> Self {
        Self {
            inner,
            pending: None,
        }
    }
}

impl<IO: AsyncWrite + Unpin> JsonErrors<IO> {
    /// Writes the pending replacement out; answers the count of hyper's bytes it stands for.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let Some((bytes, at, covers)) = &mut self.pending else {
            return Poll::Ready(Ok(0));
        };
        while *at < bytes.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &bytes[*at..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *at += n;
        }
        let covers = *covers;
        self.pending = None;
        Poll::Ready(Ok(covers))
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for JsonErrors<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for JsonErrors<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.pending.is_none() {
            match replacement(buf) {
                Some(bytes) => self.pending = Some((bytes, 0, buf.len())),
                None => return Pin::new(&mut self.inner).poll_write(cx, buf),
            }
        }
        self.drain(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.pending.is_none() {
            let mut filled = bufs.iter().filter(|b| !b.is_empty());
            let only = match (filled.next(), filled.next()) {
                (Some(one), None) => replacement(one).map(|r| (r, one.len())),
                _ => None,
            };
            match only {
                Some((bytes, covers)) => self.pending = Some((bytes, 0, covers)),
                None => return Pin::new(&mut self.inner).poll_write_vectored(cx, bufs),
            }
        }
        self.drain(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.drain(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.drain(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The OpenAI-shaped answer standing for `written`, when `written` is one of hyper's bare
/// error heads (module doc).
fn replacement(written: &[u8]) -> Option<Vec<u8>> {
    if !written.starts_with(b"HTTP/1.") || !written.ends_with(b"\r\n\r\n") {
        return None;
    }
    let head = std::str::from_utf8(written).ok()?;
    let mut lines = head[..head.len() - 4].split("\r\n");
    let status: u16 = lines.next()?.get(9..12)?.parse().ok()?;
    let (status, code, message) = match status {
        400 => (
            StatusCode::BAD_REQUEST,
            "malformed_request",
            "the request could not be read as HTTP: its request line or a header is malformed (send `POST /v1/audio/speech HTTP/1.1` and valid headers, as an OpenAI SDK does)",
        ),
        414 => (
            StatusCode::URI_TOO_LONG,
            "uri_too_long",
            "the request's path and query are too long: this server's routes take no query",
        ),
        431 => (
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers_too_large",
            "the request's headers are too large (their total must fit 64 KiB): send fewer or shorter headers",
        ),
        _ => return None,
    };
    let mut date = None;
    let mut empty = false;
    for line in lines {
        let (name, value) = line.split_once(':')?;
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" if value.trim() == "0" => empty = true,
            "connection" if value.trim().eq_ignore_ascii_case("close") => {}
            "date" => date = Some(value.trim()),
            _ => return None,
        }
    }
    if !empty {
        return None;
    }
    let body = ApiError {
        status,
        message: message.to_owned(),
        kind: "invalid_request_error",
        param: None,
        code: Some(code.to_owned()),
        retry_after_s: None,
    }
    .body()
    .to_string();
    let mut out = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or_default(),
        body.len()
    );
    if let Some(date) = date {
        out.push_str(&format!("date: {date}\r\n"));
    }
    out.push_str("\r\n");
    out.push_str(&body);
    Some(out.into_bytes())
}

#[cfg(test)]
mod tests {
    use axum::{Router, routing::get};
    use hyper_util::{
        rt::{TokioExecutor, TokioIo},
        server::conn::auto,
        service::TowerToHyperService,
    };
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;

    /// What a hyper server (with a 16 KiB head buffer) behind [`JsonErrors`] answers `request`.
    async fn answer(request: Vec<u8>) -> String {
        let (client, server) = tokio::io::duplex(1 << 20);
        let app = Router::new().route("/v1/models", get(|| async { "ok" }));
        tokio::spawn(async move {
            let mut builder = auto::Builder::new(TokioExecutor::new());
            builder.http1().max_buf_size(16 * 1024);
            let _ = builder
                .serve_connection(
                    TokioIo::new(JsonErrors::new(server)),
                    TowerToHyperService::new(app),
                )
                .await;
        });
        let (mut read, mut write) = tokio::io::split(client);
        write.write_all(&request).await.unwrap();
        let mut out = Vec::new();
        read.read_to_end(&mut out).await.unwrap();
        String::from_utf8_lossy(&out).into_owned()
    }

    fn json_of(answer: &str) -> serde_json::Value {
        let (_, body) = answer.split_once("\r\n\r\n").expect("a head and a body");
        serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {answer}"))
    }

    #[tokio::test]
    async fn a_malformed_request_line_is_400_with_an_openai_body() {
        let got = answer(b"POST /v1/audio/speech HTTP/1.1 extra\r\nHost: x\r\n\r\n".to_vec()).await;
        assert!(got.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{got}");
        assert!(got.contains("content-type: application/json"), "{got}");
        let body = json_of(&got);
        assert_eq!(body["error"]["type"], "invalid_request_error", "{got}");
        assert_eq!(body["error"]["code"], "malformed_request", "{got}");
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("request line"))
        );
    }

    #[tokio::test]
    async fn headers_too_large_are_431_with_an_openai_body() {
        let mut request = b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: ".to_vec();
        request.extend(std::iter::repeat_n(b'a', 20 * 1024));
        request.extend_from_slice(b"\r\n\r\n");
        let got = answer(request).await;
        assert!(got.starts_with("HTTP/1.1 431 "), "{got}");
        assert_eq!(json_of(&got)["error"]["code"], "headers_too_large", "{got}");
    }

    #[tokio::test]
    async fn a_good_request_passes_untouched() {
        let got =
            answer(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_vec())
                .await;
        assert!(got.starts_with("HTTP/1.1 200 OK\r\n"), "{got}");
        assert!(got.ends_with("ok"), "{got}");
    }
}
