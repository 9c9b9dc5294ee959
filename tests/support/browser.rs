//! A real headless Chromium driven over the Chrome DevTools Protocol (CDP), for the tests
//! of the console's page: they open it as Telegram would, click with the mouse and type
//! with the keyboard, and read what the page then shows, against the real service.
//!
//! Deliberately small: one browser per test, one page in it, one websocket to that page.
//! Every wait is bounded and panics with what the page showed, so a test fails instead of
//! hanging. `window.confirm` (and any other JavaScript dialog) is accepted as it opens,
//! as an operator answering "OK" would; [`Page::dialogs`] says what was asked.

#![allow(dead_code)] // each test executable compiles this module; only `service` drives a browser

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::Message;

/// How long Chromium may take to start and open its first page: generous, as the tests
/// share a small machine with the compiler.
const LAUNCH_TIMEOUT: Duration = Duration::from_secs(60);
/// How long one CDP command may take to be answered.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
/// The window's size in CSS pixels: a phone's (an iPhone 12 to 15), as operators see
/// the console inside Telegram.
const PHONE: (u32, u32) = (390, 844);
/// How often [`Page::wait_for`] looks again.
const POLL_EVERY: Duration = Duration::from_millis(50);

/// The headless browser the page is tested in: `HITL_CHROMIUM`, else `chromium` (or
/// `chromium-browser`) on `PATH`; `None` (the test skips, saying so) without one, unless
/// `HITL_REQUIRE_CHROMIUM=1`, as CI sets.
pub fn chromium() -> Option<PathBuf> {
    let given = std::env::var_os("HITL_CHROMIUM").map(PathBuf::from);
    let found = given.or_else(|| {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .flat_map(|d| ["chromium", "chromium-browser"].map(|n| d.join(n)))
                .find(|p| p.is_file())
        })
    });
    if found.is_none() {
        assert!(
            std::env::var("HITL_REQUIRE_CHROMIUM").as_deref() != Ok("1"),
            "HITL_REQUIRE_CHROMIUM=1 but no chromium (set HITL_CHROMIUM or install Debian's chromium)"
        );
        eprintln!("skipped: no chromium on PATH");
    }
    found
}

/// A headless Chromium of the test's own, with a fresh profile, in a phone-sized window;
/// killed when dropped.
pub struct Browser {
    /// Killed on drop (`kill_on_drop`), before the profile below is removed.
    child: Child,
    /// The DevTools HTTP endpoint's port (`--remote-debugging-port=0`: Chromium chooses).
    port: u16,
    profile: tempfile::TempDir,
}

impl Browser {
    /// Starts Chromium on `about:blank`; `None` when there is none (see [`chromium`]).
    pub async fn launch() -> Option<Browser> {
        let path = chromium()?;
        let profile = tempfile::tempdir().expect("a profile directory");
        let mut child = Command::new(&path)
            .args([
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--remote-debugging-port=0",
                // Loopback only: the page's async telegram.org script, were it to load,
                // would route confirm() to Telegram's own dialog, which only Telegram
                // around the page answers. The test then runs alike with or without a
                // network.
                "--no-proxy-server",
                "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
            ])
            .arg(format!("--window-size={},{}", PHONE.0, PHONE.1))
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("{} does not start: {e}", path.display()));

        // Chromium says where its DevTools listen on stderr, first thing.
        let mut lines = BufReader::new(child.stderr.take().expect("stderr is piped")).lines();
        let mut before = Vec::new();
        let listening = tokio::time::timeout(LAUNCH_TIMEOUT, async {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(url) = line.strip_prefix("DevTools listening on ") {
                    return Some(url.trim().to_owned());
                }
                before.push(line);
            }
            None
        })
        .await;
        let Ok(Some(ws)) = listening else {
            panic!(
                "chromium did not say where DevTools listen within {LAUNCH_TIMEOUT:?}; its stderr:\n{}",
                before.join("\n")
            );
        };
        // Read the rest of stderr for as long as it runs: a full pipe would stop it.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let port = url::Url::parse(&ws)
            .ok()
            .and_then(|u| u.port())
            .unwrap_or_else(|| panic!("no port in {ws}"));
        Some(Browser {
            child,
            port,
            profile,
        })
    }

    /// The page Chromium opened on `about:blank`, attached to.
    pub async fn page(&self) -> Page {
        let client = reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("an HTTP client");
        let list = format!("http://127.0.0.1:{}/json/list", self.port);
        let deadline = tokio::time::Instant::now() + LAUNCH_TIMEOUT;
        let ws = loop {
            let targets: Vec<Value> = match client.get(&list).send().await {
                Ok(r) => r.json().await.unwrap_or_default(),
                Err(_) => Vec::new(),
            };
            let page = targets.iter().find(|t| t["type"] == "page");
            if let Some(ws) = page.and_then(|t| t["webSocketDebuggerUrl"].as_str()) {
                break ws.to_owned();
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no page target in {list} within {LAUNCH_TIMEOUT:?}: {targets:?}"
            );
            tokio::time::sleep(POLL_EVERY).await;
        };
        let page = Page::attach(&ws).await;
        // Page events: JavaScript dialogs are reported (and answered) only once enabled.
        page.call("Page.enable", json!({})).await;
        // A phone's viewport: the window alone would not do, headless Chromium keeps its
        // first window at least 500 pixels wide whatever `--window-size` says.
        page.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": PHONE.0, "height": PHONE.1, "deviceScaleFactor": 1, "mobile": false}),
        )
        .await;
        page
    }
}

/// One command on its way to the connection's task: method, parameters, and where its
/// answer goes (`Err`: the CDP error object).
type Request = (String, Value, oneshot::Sender<Result<Value, Value>>);

/// A page (a tab) of the [`Browser`], over its own DevTools websocket.
pub struct Page {
    commands: mpsc::UnboundedSender<Request>,
    /// The messages of the JavaScript dialogs the page opened (each accepted), in order.
    dialogs: Arc<Mutex<Vec<String>>>,
    /// Telegram's `telegram-web-app.js` (base64), answered for telegram.org's URL once
    /// [`Page::as_telegram_client`] asked for it.
    telegram_script: Arc<Mutex<Option<String>>>,
}

/// Where the page loads Telegram's Mini App script from, in Telegram.
const TELEGRAM_SCRIPT_URL: &str = "https://telegram.org/js/telegram-web-app.js";

/// Telegram's own Mini App script, `telegram-web-app.js`, as a file: `HITL_TELEGRAM_WEB_APP_JS`
/// (CI sets it to the copy in the pinned npm package `@twa-dev/sdk`, the machines having
/// no route to telegram.org); `None` (the test skips, saying so) without one, unless
/// `HITL_REQUIRE_CHROMIUM=1`.
pub fn telegram_script() -> Option<PathBuf> {
    let found = std::env::var_os("HITL_TELEGRAM_WEB_APP_JS")
        .map(PathBuf::from)
        .filter(|p| p.is_file());
    if found.is_none() {
        assert!(
            std::env::var("HITL_REQUIRE_CHROMIUM").as_deref() != Ok("1"),
            "HITL_REQUIRE_CHROMIUM=1 but no HITL_TELEGRAM_WEB_APP_JS (Telegram's telegram-web-app.js)"
        );
        eprintln!("skipped: no HITL_TELEGRAM_WEB_APP_JS");
    }
    found
}

/// What the page's Telegram client records: every event Telegram's script posts to it
/// (`TelegramWebviewProxy.postEvent`, as the Android and iOS clients take them), in order.
const TELEGRAM_CLIENT: &str = "window.__telegramEvents = [];
window.TelegramWebviewProxy = {
  postEvent(type, data) {
    window.__telegramEvents.push([type, data ? JSON.parse(data) : null]);
  },
};";

impl Page {
    async fn attach(ws: &str) -> Page {
        let (socket, _) =
            tokio::time::timeout(COMMAND_TIMEOUT, tokio_tungstenite::connect_async(ws))
                .await
                .unwrap_or_else(|_| panic!("no websocket to {ws} within {COMMAND_TIMEOUT:?}"))
                .unwrap_or_else(|e| panic!("websocket to {ws}: {e}"));
        let (commands, receiver) = mpsc::unbounded_channel();
        let dialogs = Arc::new(Mutex::new(Vec::new()));
        let telegram_script = Arc::new(Mutex::new(None));
        tokio::spawn(connection(
            socket,
            receiver,
            dialogs.clone(),
            telegram_script.clone(),
        ));
        Page {
            commands,
            dialogs,
            telegram_script,
        }
    }

    /// Makes the page's next loads run inside a Telegram client, as the phone apps run a
    /// Mini App: Telegram's real `script` answers for its telegram.org URL, and the
    /// client's bridge (`TelegramWebviewProxy`) records what the script tells the client
    /// ([`Page::telegram_events`]); [`Page::telegram_sends`] is the client's side.
    pub async fn as_telegram_client(&self, script: &Path) {
        self.serve_telegram_script(script).await;
        self.call(
            "Page.addScriptToEvaluateOnNewDocument",
            json!({ "source": TELEGRAM_CLIENT }),
        )
        .await;
    }

    /// Makes Telegram's real `script` answer for its telegram.org URL, as on a machine
    /// that reaches telegram.org; nothing else of a Telegram client.
    pub async fn serve_telegram_script(&self, script: &Path) {
        let body = std::fs::read(script).unwrap_or_else(|e| panic!("{}: {e}", script.display()));
        *self.telegram_script.lock().expect("not poisoned") =
            Some(base64::engine::general_purpose::STANDARD.encode(body));
        self.call(
            "Fetch.enable",
            json!({"patterns": [{"urlPattern": format!("{TELEGRAM_SCRIPT_URL}*")}]}),
        )
        .await;
    }

    /// The events Telegram's script posted to the client so far, as `[type, data]`.
    pub async fn telegram_events(&self) -> Vec<(String, Value)> {
        let events = self.eval("window.__telegramEvents || []").await;
        events
            .as_array()
            .map(|all| {
                all.iter()
                    .map(|e| (e[0].as_str().unwrap_or_default().to_owned(), e[1].clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The data of the last `event` Telegram's script posted (`Null` when none).
    pub async fn last_telegram_event(&self, event: &str) -> Value {
        self.telegram_events()
            .await
            .into_iter()
            .rev()
            .find(|(kind, _)| kind == event)
            .map(|(_, data)| data)
            .unwrap_or(Value::Null)
    }

    /// Waits until the last `event` posted satisfies `wanted`; panics after `timeout`
    /// with every event posted.
    pub async fn wait_for_telegram_event(
        &self,
        event: &str,
        timeout: Duration,
        wanted: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let last = self.last_telegram_event(event).await;
            if wanted(&last) {
                return last;
            }
            if tokio::time::Instant::now() >= deadline {
                panic!(
                    "no such {event} within {timeout:?}; posted: {:?}",
                    self.telegram_events().await
                );
            }
            tokio::time::sleep(POLL_EVERY).await;
        }
    }

    /// The Telegram client sends `event` to the page (`main_button_pressed`, ...), as a
    /// tap on its own controls does.
    pub async fn telegram_sends(&self, event: &str) {
        self.eval(&format!(
            "window.Telegram.WebView.receiveEvent({}, null)",
            js_string(event)
        ))
        .await;
    }

    /// The Telegram client sends `event` with `data` (`theme_changed` and its
    /// `theme_params`, ...).
    pub async fn telegram_sends_with(&self, event: &str, data: &Value) {
        self.eval(&format!(
            "window.Telegram.WebView.receiveEvent({}, {data})",
            js_string(event)
        ))
        .await;
    }

    /// The page's clock reads in the time zone `zone` (an IANA name) from now on.
    pub async fn set_time_zone(&self, zone: &str) {
        self.call(
            "Emulation.setTimezoneOverride",
            json!({ "timezoneId": zone }),
        )
        .await;
    }

    /// Sends the CDP command `method` and returns its result; panics on a CDP error or
    /// without an answer within 30 s.
    pub async fn call(&self, method: &str, params: Value) -> Value {
        match self.try_call(method, params.clone()).await {
            Ok(result) => result,
            Err(error) => panic!("{method} {params}: {error}"),
        }
    }

    async fn try_call(&self, method: &str, params: Value) -> Result<Value, Value> {
        let (reply, answer) = oneshot::channel();
        self.commands
            .send((method.to_owned(), params, reply))
            .expect("the browser's connection is open");
        match tokio::time::timeout(COMMAND_TIMEOUT, answer).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => panic!("the browser closed the connection during {method}"),
            Err(_) => panic!("no answer to {method} within {COMMAND_TIMEOUT:?}"),
        }
    }

    /// Opens `url` and returns once its document is parsed (its own scripts ran; what
    /// they fetch may still be on its way: [`Page::wait_for`] that).
    pub async fn goto(&self, url: &str) {
        let r = self.call("Page.navigate", json!({ "url": url })).await;
        if let Some(error) = r["errorText"].as_str() {
            panic!("{url} does not open: {error}");
        }
        let deadline = tokio::time::Instant::now() + COMMAND_TIMEOUT;
        let parsed = "location.href !== 'about:blank' && document.readyState !== 'loading'";
        while self.try_eval(parsed).await != Ok(json!(true)) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{url} still loading after {COMMAND_TIMEOUT:?}"
            );
            tokio::time::sleep(POLL_EVERY).await;
        }
    }

    /// The value of the JavaScript expression `js` (a promise is awaited); panics when it
    /// throws.
    pub async fn eval(&self, js: &str) -> Value {
        self.try_eval(js)
            .await
            .unwrap_or_else(|e| panic!("{js} throws: {e}"))
    }

    /// `eval`, with what it threw (or why it could not run) as the error: while the page
    /// navigates, its old context is gone and an expression fails without being wrong.
    async fn try_eval(&self, js: &str) -> Result<Value, String> {
        let r = self
            .try_call(
                "Runtime.evaluate",
                json!({"expression": js, "returnByValue": true, "awaitPromise": true}),
            )
            .await
            .map_err(|e| e.to_string())?;
        if let Some(thrown) = r.get("exceptionDetails") {
            let description = thrown["exception"]["description"]
                .as_str()
                .or(thrown["text"].as_str())
                .unwrap_or_default();
            return Err(description.to_owned());
        }
        Ok(r["result"].get("value").cloned().unwrap_or(Value::Null))
    }

    /// Waits until an element matches `selector`; panics after `timeout` with the text the
    /// page shows.
    pub async fn wait_for(&self, selector: &str, timeout: Duration) {
        let js = format!("document.querySelector({}) !== null", js_string(selector));
        let deadline = tokio::time::Instant::now() + timeout;
        while self.try_eval(&js).await != Ok(json!(true)) {
            if tokio::time::Instant::now() >= deadline {
                let body = self
                    .try_eval("document.body ? document.body.innerText : ''")
                    .await;
                panic!("no {selector} on the page within {timeout:?}; it shows: {body:?}");
            }
            tokio::time::sleep(POLL_EVERY).await;
        }
    }

    /// Clicks the element `selector` matches with the mouse, as a person would: scrolled
    /// into view, a left press and release at its centre. Panics when there is no such
    /// element, or another one covers its centre (the click would land there).
    pub async fn click(&self, selector: &str) {
        let js = format!(
            "(() => {{
                const e = document.querySelector({sel});
                if (!e) return null;
                e.scrollIntoView({{block: 'center', inline: 'center'}});
                const r = e.getBoundingClientRect();
                const x = r.left + r.width / 2, y = r.top + r.height / 2;
                const top = document.elementFromPoint(x, y);
                return {{x, y, reachable: top !== null && e.contains(top)}};
            }})()",
            sel = js_string(selector)
        );
        let at = self.eval(&js).await;
        assert!(!at.is_null(), "no {selector} to click");
        assert_eq!(
            at["reachable"], true,
            "{selector} is covered at its centre {at}"
        );
        for kind in ["mousePressed", "mouseReleased"] {
            self.call(
                "Input.dispatchMouseEvent",
                json!({"type": kind, "x": at["x"], "y": at["y"], "button": "left", "clickCount": 1}),
            )
            .await;
        }
    }

    /// Types `text` into the field `selector` matches, replacing what it held: focused,
    /// its text selected, then `text` inserted as the keyboard (an IME) would.
    pub async fn type_into(&self, selector: &str, text: &str) {
        let js = format!(
            "(() => {{
                const e = document.querySelector({sel});
                if (!e) return false;
                e.focus();
                if (typeof e.select === 'function') e.select();
                else document.execCommand('selectAll');
                return true;
            }})()",
            sel = js_string(selector)
        );
        assert_eq!(self.eval(&js).await, true, "no {selector} to type into");
        self.call("Input.insertText", json!({ "text": text })).await;
    }

    /// The text the element `selector` matches shows (`innerText`); panics without one.
    pub async fn text(&self, selector: &str) -> String {
        let js = format!(
            "(() => {{ const e = document.querySelector({}); return e ? e.innerText : null; }})()",
            js_string(selector)
        );
        match self.eval(&js).await {
            Value::String(text) => text,
            _ => panic!("no {selector} on the page"),
        }
    }

    /// Writes what the window shows to `path`, as a PNG.
    pub async fn screenshot(&self, path: &Path) {
        let shot = self
            .call("Page.captureScreenshot", json!({"format": "png"}))
            .await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().expect("the screenshot's data"))
            .expect("the screenshot in base64");
        std::fs::write(path, png).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }

    /// The messages of the JavaScript dialogs (`window.confirm`, …) the page opened so
    /// far, each accepted.
    pub fn dialogs(&self) -> Vec<String> {
        self.dialogs.lock().expect("not poisoned").clone()
    }
}

/// `s` as a JavaScript string literal (JSON's is one).
fn js_string(s: &str) -> String {
    Value::from(s).to_string()
}

/// The page's websocket: sends the commands, hands each answer to whoever waits for it,
/// accepts every JavaScript dialog as it opens (the page stays blocked in
/// `window.confirm` until then, and so does the mouse click that opened it), and answers
/// the requests `Fetch.enable` paused: Telegram's script when it was given, else a
/// network error, as on a machine with no route to telegram.org.
async fn connection(
    socket: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
    mut commands: mpsc::UnboundedReceiver<Request>,
    dialogs: Arc<Mutex<Vec<String>>>,
    telegram_script: Arc<Mutex<Option<String>>>,
) {
    let (mut sink, mut stream) = socket.split();
    let mut waiting: HashMap<u64, oneshot::Sender<Result<Value, Value>>> = HashMap::new();
    let mut next_id = 0u64;
    loop {
        let outgoing = tokio::select! {
            command = commands.recv() => {
                // The page was dropped: nobody waits for anything any more.
                let Some((method, params, reply)) = command else { return };
                next_id += 1;
                waiting.insert(next_id, reply);
                json!({"id": next_id, "method": method, "params": params})
            }
            incoming = stream.next() => {
                // Closed (the browser went): the waiting replies drop, their callers panic.
                let Some(Ok(message)) = incoming else { return };
                let Message::Text(text) = message else { continue };
                let Ok(message) = serde_json::from_str::<Value>(text.as_str()) else { continue };
                if let Some(id) = message["id"].as_u64() {
                    if let Some(reply) = waiting.remove(&id) {
                        let answer = match message.get("error") {
                            Some(error) => Err(error.clone()),
                            None => Ok(message["result"].clone()),
                        };
                        let _ = reply.send(answer);
                    }
                    continue;
                }
                // Their answers are nobody's to wait for: not in `waiting`, ignored when
                // they come.
                next_id += 1;
                match message["method"].as_str() {
                    Some("Page.javascriptDialogOpening") => {
                        let asked = message["params"]["message"].as_str().unwrap_or_default();
                        dialogs.lock().expect("not poisoned").push(asked.to_owned());
                        json!({"id": next_id, "method": "Page.handleJavaScriptDialog", "params": {"accept": true}})
                    }
                    Some("Fetch.requestPaused") => {
                        let request = message["params"]["requestId"].clone();
                        match telegram_script.lock().expect("not poisoned").clone() {
                            Some(body) => json!({"id": next_id, "method": "Fetch.fulfillRequest", "params": {
                                "requestId": request, "responseCode": 200, "body": body,
                                "responseHeaders": [{"name": "Content-Type", "value": "text/javascript"}],
                            }}),
                            None => json!({"id": next_id, "method": "Fetch.failRequest",
                                "params": {"requestId": request, "errorReason": "NameNotResolved"}}),
                        }
                    }
                    _ => continue,
                }
            }
        };
        if sink
            .send(Message::text(outgoing.to_string()))
            .await
            .is_err()
        {
            return;
        }
    }
}
