//! A TCP proxy in front of the test API server that can turn into a black
//! hole: after [`Blackhole::cut`], requests on open and new connections hang
//! (no answer, no error), like an API server behind a dead network path.
#![allow(dead_code)]

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The proxy and a client that goes through it.
pub struct Blackhole {
    cut: Arc<watch::Sender<bool>>,
    task: JoinHandle<()>,
    /// A client of the test API server through the proxy.
    pub client: Client,
}

impl Blackhole {
    /// Starts a proxy to the API server of the test kubeconfig.
    pub async fn start() -> Blackhole {
        let kc = Kubeconfig::read_from(mcm_testenv::kubeconfig_path()).expect("kubeconfig");
        let mut config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .expect("config");
        let url = config.cluster_url.clone();
        let host = url.host().unwrap_or("127.0.0.1").to_string();
        let port = url.port_u16().unwrap_or(443);
        let bind_host = if host == "localhost" {
            "127.0.0.1"
        } else {
            &host
        };
        let listener = TcpListener::bind((bind_host, 0)).await.expect("bind");
        let local = listener.local_addr().expect("addr");
        config.cluster_url = format!(
            "{}://{host}:{}",
            url.scheme_str().unwrap_or("https"),
            local.port()
        )
        .parse()
        .expect("proxy url");
        let (tx, rx) = watch::channel(false);
        let upstream = format!("{bind_host}:{port}");
        let task = tokio::spawn(async move {
            loop {
                let Ok((inbound, _)) = listener.accept().await else {
                    return;
                };
                let (rx, upstream) = (rx.clone(), upstream.clone());
                tokio::spawn(forward(inbound, upstream, rx));
            }
        });
        Blackhole {
            cut: Arc::new(tx),
            task,
            client: Client::try_from(config).expect("client"),
        }
    }

    /// From now on nothing passes: requests hang.
    pub fn cut(&self) {
        let _ = self.cut.send(true);
    }
}

impl Drop for Blackhole {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn forward(mut inbound: TcpStream, upstream: String, mut cut: watch::Receiver<bool>) {
    if *cut.borrow() {
        // Hold the connection open and never answer.
        let _keep = inbound;
        std::future::pending::<()>().await;
        return;
    }
    let Ok(mut outbound) = TcpStream::connect(upstream).await else {
        let _ = inbound.shutdown().await;
        return;
    };
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
        _ = cut.wait_for(|c| *c) => {}
    }
    if *cut.borrow() {
        // Cut: keep both ends open, pass nothing.
        let _keep = (inbound, outbound);
        std::future::pending::<()>().await;
    }
}
