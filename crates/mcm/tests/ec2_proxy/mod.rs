//! A counting, throttling HTTP proxy in front of moto, for `aws_e2e.rs`.
//!
//! `mcm run` talks to EC2 through it, so the test sees every EC2 call the
//! binary makes: the action of each request (the EC2 Query protocol's
//! `Action=` form field) is counted, and each action class has EC2's
//! published token bucket (RunInstances 5 burst / 2 per s, TerminateInstances
//! 100 / 5, Describe* 100 / 20, other mutations 50 / 5): a request beyond it
//! is answered `503 RequestLimitExceeded`, as EC2 answers, and counted as
//! throttled. moto itself never throttles, so without the buckets "none
//! throttled" would prove nothing.

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What the proxy saw.
#[derive(Clone, Debug, Default)]
pub struct Counts {
    /// Requests per EC2 action (throttled ones included).
    pub calls: BTreeMap<String, u64>,
    /// Requests answered RequestLimitExceeded, per action.
    pub throttled: BTreeMap<String, u64>,
    /// When each RunInstances arrived (since the proxy started) and whether it was throttled.
    pub run_instances: Vec<(f64, bool)>,
}

impl Counts {
    /// All requests.
    pub fn total(&self) -> u64 {
        self.calls.values().sum()
    }

    /// All throttled requests.
    pub fn total_throttled(&self) -> u64 {
        self.throttled.values().sum()
    }
}

struct Bucket {
    capacity: f64,
    per_sec: f64,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    fn new(capacity: u32, per_sec: f64) -> Self {
        Bucket {
            capacity: f64::from(capacity),
            per_sec,
            tokens: f64::from(capacity),
            last: Instant::now(),
        }
    }

    fn take(&mut self) -> bool {
        let now = Instant::now();
        let refill = now.duration_since(self.last).as_secs_f64() * self.per_sec;
        self.tokens = (self.tokens + refill).min(self.capacity);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

struct Inner {
    started: Instant,
    upstream: String,
    counts: Mutex<Counts>,
    buckets: Mutex<BTreeMap<&'static str, Bucket>>,
}

/// The proxy; it serves until the test ends.
#[derive(Clone)]
pub struct Ec2Proxy {
    inner: Arc<Inner>,
    /// `http://127.0.0.1:<port>`, for `--aws-endpoint`.
    pub url: String,
}

/// EC2's bucket class of an action.
fn class_of(action: &str) -> &'static str {
    match action {
        "RunInstances" => "RunInstances",
        "TerminateInstances" => "TerminateInstances",
        a if a.starts_with("Describe") => "Describe",
        _ => "Mutating",
    }
}

/// The `Action` form field of an EC2 Query request.
fn action_of(body: &[u8]) -> String {
    String::from_utf8_lossy(body)
        .split('&')
        .find_map(|kv| kv.strip_prefix("Action="))
        .unwrap_or("unknown")
        .to_string()
}

impl Ec2Proxy {
    /// Starts the proxy on a free local port, forwarding to `upstream` (moto),
    /// on a runtime of its own: the test's single-threaded runtime would
    /// hold requests back while the test works and hand them to the buckets
    /// in bunches, throttling what EC2 would not.
    pub fn start(upstream: &str) -> Ec2Proxy {
        let buckets = BTreeMap::from([
            ("RunInstances", Bucket::new(5, 2.0)),
            ("TerminateInstances", Bucket::new(100, 5.0)),
            ("Describe", Bucket::new(100, 20.0)),
            ("Mutating", Bucket::new(50, 5.0)),
        ]);
        let inner = Arc::new(Inner {
            started: Instant::now(),
            upstream: upstream
                .trim_start_matches("http://")
                .trim_end_matches('/')
                .to_string(),
            counts: Mutex::new(Counts::default()),
            buckets: Mutex::new(buckets),
        });
        let app = axum::Router::new()
            .fallback(forward)
            .with_state(Arc::clone(&inner));
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("proxy runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("proxy port");
                let addr = listener.local_addr().expect("proxy address");
                tx.send(format!("http://{addr}")).expect("proxy url");
                let _ = axum::serve(listener, app).await;
            });
        });
        let url = rx.recv().expect("the proxy starts");
        Ec2Proxy { inner, url }
    }

    /// A snapshot of the counts.
    pub fn counts(&self) -> Counts {
        self.inner.counts.lock().expect("counts").clone()
    }
}

async fn forward(
    State(inner): State<Arc<Inner>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let action = action_of(&body);
    let allowed = inner
        .buckets
        .lock()
        .expect("buckets")
        .get_mut(class_of(&action))
        .map(Bucket::take)
        .unwrap_or(true);
    {
        let mut c = inner.counts.lock().expect("counts");
        *c.calls.entry(action.clone()).or_default() += 1;
        if !allowed {
            *c.throttled.entry(action.clone()).or_default() += 1;
        }
        if action == "RunInstances" {
            let at = inner.started.elapsed().as_secs_f64();
            c.run_instances.push((at, !allowed));
        }
    }
    if !allowed {
        let xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error>\
                   <Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message>\
                   </Error></Errors><RequestID>ec2-proxy-throttled</RequestID></Response>";
        return Response::builder()
            .status(StatusCode::SERVICE_UNAVAILABLE)
            .header("content-type", "text/xml")
            .body(Body::from(xml))
            .expect("response");
    }
    match upstream(&inner.upstream, &method, &uri, &headers, &body).await {
        Ok(r) => r,
        Err(e) => Response::builder()
            .status(StatusCode::BAD_GATEWAY)
            .body(Body::from(format!("ec2 proxy: {e}")))
            .expect("response"),
    }
}

/// One request to moto over a fresh connection (`Connection: close`).
async fn upstream(
    host: &str,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
) -> std::io::Result<Response> {
    let mut s = tokio::net::TcpStream::connect(host).await?;
    let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let mut req = format!("{method} {path} HTTP/1.1\r\n");
    for (k, v) in headers {
        let k = k.as_str();
        if matches!(
            k,
            "connection" | "keep-alive" | "transfer-encoding" | "content-length"
        ) {
            continue;
        }
        req.push_str(&format!(
            "{k}: {}\r\n",
            String::from_utf8_lossy(v.as_bytes())
        ));
    }
    req.push_str(&format!(
        "content-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    ));
    s.write_all(req.as_bytes()).await?;
    s.write_all(body).await?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no header end in moto's answer"))?;
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut payload = raw[split + 4..].to_vec();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other("no status in moto's answer"))?;
    let mut b = Response::builder().status(status);
    let mut chunked = false;
    for line in lines {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let k = k.trim().to_ascii_lowercase();
        let v = v.trim();
        if k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked") {
            chunked = true;
            continue;
        }
        if matches!(k.as_str(), "connection" | "keep-alive" | "content-length") {
            continue;
        }
        b = b.header(k, v);
    }
    if chunked {
        payload = dechunk(&payload);
    }
    b.body(Body::from(payload))
        .map_err(|e| std::io::Error::other(e.to_string()))
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = data.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(
            String::from_utf8_lossy(&data[..eol])
                .split(';')
                .next()
                .unwrap_or("0")
                .trim(),
            16,
        )
        .unwrap_or(0);
        data = &data[eol + 2..];
        if size == 0 || data.len() < size {
            break;
        }
        out.extend_from_slice(&data[..size]);
        data = &data[(size + 2).min(data.len())..];
    }
    out
}
