//! A TCP proxy on `127.0.0.1:0` in front of a server (PostgreSQL in the tests), whose
//! link a test can cut and restore: an outage of the server as the service sees it (its
//! connections reset, new ones refused) without stopping the server the other tests
//! share.

#![allow(dead_code)] // each test executable uses a subset

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

pub struct TcpProxy {
    pub addr: SocketAddr,
    open: Arc<AtomicBool>,
    links: Arc<Mutex<Vec<AbortHandle>>>,
}

impl TcpProxy {
    /// Starts forwarding every connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> TcpProxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let addr = listener.local_addr().expect("proxy address");
        let open = Arc::new(AtomicBool::new(true));
        let links: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let (is_open, all) = (open.clone(), links.clone());
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if !is_open.load(Ordering::SeqCst) {
                    drop(client); // refused: closed at once
                    continue;
                }
                let link = tokio::spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                all.lock().unwrap().push(link.abort_handle());
            }
        });
        TcpProxy { addr, open, links }
    }

    /// The server is out of reach: every connection through the proxy is closed, and new
    /// ones are closed as soon as they are accepted.
    pub fn cut(&self) {
        self.open.store(false, Ordering::SeqCst);
        for link in self.links.lock().unwrap().drain(..) {
            link.abort();
        }
    }

    /// The server is back.
    pub fn restore(&self) {
        self.open.store(true, Ordering::SeqCst);
    }

    /// `url` (a `postgres://` URL) with its host and port replaced by the proxy's.
    pub fn url_through(&self, url: &str) -> String {
        let mut url = reqwest::Url::parse(url).expect("a URL");
        url.set_host(Some(&self.addr.ip().to_string()))
            .expect("a host");
        url.set_port(Some(self.addr.port())).expect("a port");
        url.to_string()
    }
}
