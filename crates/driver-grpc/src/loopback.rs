//! A driver served on a private Unix socket with a client in front of it,
//! in one process: how a provider's tests run the conformance kit out of
//! process (the same checks, through the whole gRPC hop).

use crate::client::{ClientOptions, GrpcDriver};
use crate::endpoint::Endpoint;
use crate::server::{serve_with_shutdown, ServeError, ServeOptions, ServerInfo};
use mcm_driver::{Driver, Status};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

static SEQ: AtomicU64 = AtomicU64::new(0);

/// Why a loopback did not start.
#[derive(Debug, thiserror::Error)]
pub enum LoopbackError {
    /// The server failed.
    #[error(transparent)]
    Serve(#[from] ServeError),
    /// The client could not be built.
    #[error(transparent)]
    Client(#[from] crate::client::ClientError),
    /// The server never answered Info.
    #[error("the loopback driver server never answered Info: {0}")]
    NoAnswer(Status),
}

/// A served driver and its client.
pub struct Loopback {
    /// The client: use it as the driver under test.
    pub client: GrpcDriver,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), ServeError>>,
    dir: PathBuf,
}

impl Loopback {
    /// Serves `driver` for `provider` on a socket in a new temporary
    /// directory and waits until it answers `Info`.
    pub async fn start(driver: Arc<dyn Driver>, provider: &str) -> Result<Loopback, LoopbackError> {
        let dir = std::env::temp_dir().join(format!(
            "mcm-driver-loopback-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::SeqCst)
        ));
        let endpoint = Endpoint::Unix(dir.join("driver.sock"));
        let info = ServerInfo {
            name: format!("loopback {provider}"),
            version: env!("CARGO_PKG_VERSION").into(),
            providers: vec![provider.to_ascii_lowercase()],
            ..Default::default()
        };
        let (stop, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(serve_with_shutdown(
            driver,
            info,
            ServeOptions::new(endpoint.clone()),
            async {
                let _ = rx.await;
            },
        ));
        let client = GrpcDriver::new(provider, &endpoint, ClientOptions::default())?;
        let mut last = Status::internal("not asked yet");
        for _ in 0..300 {
            if task.is_finished() {
                return match task.await {
                    Ok(Err(e)) => Err(e.into()),
                    _ => Err(LoopbackError::NoAnswer(last)),
                };
            }
            match client.handshake().await {
                Ok(_) => {
                    return Ok(Loopback {
                        client,
                        stop: Some(stop),
                        task,
                        dir,
                    })
                }
                Err(e) => last = e,
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Err(LoopbackError::NoAnswer(last))
    }

    /// Stops the server (in-flight calls finish) and removes the directory.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
