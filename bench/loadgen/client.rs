//! A minimal HTTP/1.1 keep-alive client: one request at a time on one connection.
//!
//! The load generator shares two cores with the service it measures, so its client must
//! cost as little as possible: no pool, no header map, no chunked decoding (every answer
//! of the service and of the bare axum handler carries `Content-Length`). A general
//! client (reqwest) would spend a good part of a core on bookkeeping the server does not
//! need; `bench/run` shows the ceiling this client reaches against a bare axum handler.

use std::io;
use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    head: Vec<u8>,
}

fn bad(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

impl Conn {
    pub async fn connect(addr: SocketAddr) -> io::Result<Conn> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            buf: Vec::with_capacity(4096),
            head: Vec::with_capacity(512),
        })
    }

    /// Sends one request and reads its whole answer: (status, body).
    pub async fn request(
        &mut self,
        method: &str,
        path: &str,
        bearer: Option<&str>,
        body: &[u8],
    ) -> io::Result<(u16, Vec<u8>)> {
        self.head.clear();
        self.head.extend_from_slice(method.as_bytes());
        self.head.push(b' ');
        self.head.extend_from_slice(path.as_bytes());
        self.head
            .extend_from_slice(b" HTTP/1.1\r\nHost: 127.0.0.1\r\n");
        if let Some(token) = bearer {
            self.head.extend_from_slice(b"Authorization: Bearer ");
            self.head.extend_from_slice(token.as_bytes());
            self.head.extend_from_slice(b"\r\n");
        }
        if !body.is_empty() {
            self.head
                .extend_from_slice(b"Content-Type: application/json\r\n");
        }
        self.head
            .extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
        self.head.extend_from_slice(body);
        self.stream.write_all(&self.head).await?;
        self.read_response().await
    }

    async fn read_response(&mut self) -> io::Result<(u16, Vec<u8>)> {
        let header_end = loop {
            if let Some(i) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            self.fill().await?;
        };
        let head = std::str::from_utf8(&self.buf[..header_end])
            .map_err(|_| bad("response head is not UTF-8"))?;
        let mut lines = head.split("\r\n");
        let status = lines
            .next()
            .and_then(|l| l.split(' ').nth(1))
            .and_then(|s| s.parse::<u16>().ok())
            .ok_or_else(|| bad("no status line"))?;
        let length = lines
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.trim().parse::<usize>().ok())
            .ok_or_else(|| bad("response without Content-Length"))?;
        while self.buf.len() < header_end + length {
            self.fill().await?;
        }
        let body = self.buf[header_end..header_end + length].to_vec();
        self.buf.drain(..header_end + length);
        Ok((status, body))
    }

    async fn fill(&mut self) -> io::Result<()> {
        let mut chunk = [0u8; 8192];
        let n = self.stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed mid-response",
            ));
        }
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(())
    }
}
