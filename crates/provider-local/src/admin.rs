//! The operator side of the local cloud: [`AdminClient`] for the admin API and
//! the `mcm local-cloud ...` subcommands ([`LocalCloudCommand`], [`run`]).
//!
//! ```text
//! mcm local-cloud serve --port 7070 --store .mcm/local-cloud.redb --target-kubeconfig kubeconfig
//! mcm local-cloud kill i-0123456789abcdef0      # the instance crashes: its Node goes Unknown
//! mcm local-cloud kill --url http://127.0.0.1:7070 <machine name>   # the same, by machine name
//! mcm local-cloud start i-0123456789abcdef0     # boots again
//! mcm local-cloud faults --patch '{"create": {"errorRate": 0.2}}'
//! mcm local-cloud stats
//! ```

use crate::driver::{base_url, http_client};
use crate::server::{serve, ServeArgs};
use crate::tunables::Tunables;
use crate::wire::{ErrorBody, Instance, InstanceList, Stats};
use crate::Error;
use serde::de::DeserializeOwned;
use std::time::Duration;

/// The default URL of the local cloud.
pub const DEFAULT_URL: &str = "http://127.0.0.1:7070";

/// An operator action on one instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum InstanceAction {
    /// Stop it (no more heartbeats).
    Stop,
    /// Crash it (no more heartbeats).
    Kill,
    /// Boot a stopped or killed instance again.
    Start,
}

impl InstanceAction {
    /// The path segment of the action.
    pub fn as_str(self) -> &'static str {
        match self {
            InstanceAction::Stop => "stop",
            InstanceAction::Kill => "kill",
            InstanceAction::Start => "start",
        }
    }
}

/// A client of the admin API.
#[derive(Clone, Debug)]
pub struct AdminClient {
    base: reqwest::Url,
    http: reqwest::Client,
}

impl AdminClient {
    /// A client for the local cloud at `url`.
    pub fn new(url: impl AsRef<str>) -> Result<AdminClient, Error> {
        Ok(AdminClient {
            base: base_url(url.as_ref())?,
            http: http_client(Duration::from_secs(30))?,
        })
    }

    async fn send<T: DeserializeOwned>(&self, rb: reqwest::RequestBuilder) -> Result<T, Error> {
        let resp = rb.send().await.map_err(|e| Error::Request(e.to_string()))?;
        let status = resp.status();
        let body = resp
            .bytes()
            .await
            .map_err(|e| Error::Request(e.to_string()))?;
        if status.is_success() {
            return serde_json::from_slice(&body)
                .map_err(|e| Error::Request(format!("undecodable answer: {e}")));
        }
        match serde_json::from_slice::<ErrorBody>(&body) {
            Ok(e) => Err(Error::Api {
                code: e.code(),
                message: e.message,
            }),
            Err(_) => Err(Error::Request(format!("HTTP {status}"))),
        }
    }

    fn url(&self, path: &str) -> Result<reqwest::Url, Error> {
        self.base.join(path).map_err(|e| Error::Url {
            url: format!("{}{path}", self.base),
            message: e.to_string(),
        })
    }

    /// `POST /admin/instances/{id}/{action}`; `id` may also be a machine name.
    pub async fn instance_action(
        &self,
        id: &str,
        action: InstanceAction,
    ) -> Result<Instance, Error> {
        let url = self.url(&format!("admin/instances/{id}/{}", action.as_str()))?;
        // The cloud takes JSON bodies only (a cross-site form cannot send one).
        self.send(self.http.post(url).json(&serde_json::json!({})))
            .await
    }

    /// `GET /admin/instances`: every instance.
    pub async fn instances(&self) -> Result<Vec<Instance>, Error> {
        let l: InstanceList = self
            .send(self.http.get(self.url("admin/instances")?))
            .await?;
        Ok(l.instances)
    }

    /// `GET /admin/faults`.
    pub async fn tunables(&self) -> Result<Tunables, Error> {
        self.send(self.http.get(self.url("admin/faults")?)).await
    }

    /// `PUT /admin/faults`: replace the tunables (fields left out take the defaults).
    pub async fn put_tunables(&self, doc: &serde_json::Value) -> Result<Tunables, Error> {
        self.send(self.http.put(self.url("admin/faults")?).json(doc))
            .await
    }

    /// `PATCH /admin/faults`: merge into the current tunables.
    pub async fn patch_tunables(&self, patch: &serde_json::Value) -> Result<Tunables, Error> {
        self.send(self.http.patch(self.url("admin/faults")?).json(patch))
            .await
    }

    /// `GET /admin/stats`.
    pub async fn stats(&self) -> Result<Stats, Error> {
        self.send(self.http.get(self.url("admin/stats")?)).await
    }

    /// `DELETE /admin/stats`: reset the counters.
    pub async fn reset_stats(&self) -> Result<Stats, Error> {
        self.send(self.http.delete(self.url("admin/stats")?)).await
    }
}

/// The command that kills an instance, as `mcm up` prints it: `program`
/// (how to call this binary) `local-cloud kill --url <url>` and the
/// placeholder [`KILL_HINT_PLACEHOLDER`].
pub fn kill_hint(program: &str, url: &str) -> String {
    format!("{program} local-cloud kill --url {url} {KILL_HINT_PLACEHOLDER}")
}

/// What the user replaces in [`kill_hint`].
pub const KILL_HINT_PLACEHOLDER: &str = "<machine name or instance id>";

/// How a user calls the running binary: its file name when that name on the
/// `PATH` is this very binary, else its path (relative to the current folder
/// when inside it, e.g. `target/debug/mcm`).
pub fn invocation() -> String {
    let Ok(exe) = std::env::current_exe() else {
        return "mcm".to_string();
    };
    let exe = exe.canonicalize().unwrap_or(exe);
    let name = exe
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| "mcm".to_string());
    let on_path = std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            dir.join(&name)
                .canonicalize()
                .is_ok_and(|found| found == exe)
        })
    });
    if on_path {
        return name;
    }
    let relative = std::env::current_dir()
        .ok()
        .and_then(|cwd| cwd.canonicalize().ok())
        .and_then(|cwd| exe.strip_prefix(cwd).ok().map(|p| p.to_path_buf()));
    relative.unwrap_or(exe).to_string_lossy().to_string()
}

/// Where the local cloud is.
#[derive(clap::Args, Debug, Clone)]
pub struct UrlArgs {
    /// The base URL of the local cloud.
    #[arg(
        long = "local-cloud-url",
        visible_alias = "url",
        env = "MCM_LOCAL_CLOUD_URL",
        default_value = DEFAULT_URL
    )]
    pub url: String,
}

/// One instance.
#[derive(clap::Args, Debug, Clone)]
pub struct InstanceArgs {
    /// The instance: its ID (`i-...`), its provider ID (`local:///<zone>/<id>`)
    /// or the name of its machine.
    pub instance: String,
    #[allow(
        missing_docs,
        reason = "a doc comment here would become clap help text"
    )]
    #[command(flatten)]
    pub url: UrlArgs,
}

/// `faults`: show or change the tunables.
#[derive(clap::Args, Debug, Clone)]
pub struct FaultsArgs {
    /// A JSON merge patch applied to the current tunables.
    #[arg(long, conflicts_with = "replace")]
    pub patch: Option<String>,
    /// A JSON document replacing the tunables (fields left out take the defaults).
    #[arg(long)]
    pub replace: Option<String>,
    #[allow(
        missing_docs,
        reason = "a doc comment here would become clap help text"
    )]
    #[command(flatten)]
    pub url: UrlArgs,
}

/// The `mcm local-cloud` subcommands.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum LocalCloudCommand {
    /// Run the local cloud server.
    Serve(ServeArgs),
    /// Stop an instance (its kubelet stops heartbeating).
    Stop(InstanceArgs),
    /// Crash an instance (its kubelet stops heartbeating).
    Kill(InstanceArgs),
    /// Boot a stopped or killed instance again.
    Start(InstanceArgs),
    /// List all instances.
    Instances(UrlArgs),
    /// Show the call counters per operation.
    Stats(UrlArgs),
    /// Show or change latency, rate limits and faults.
    Faults(FaultsArgs),
}

fn print_json<T: serde::Serialize>(v: &T) -> Result<(), Error> {
    let text = serde_json::to_string_pretty(v).map_err(|e| Error::Request(e.to_string()))?;
    println!("{text}");
    Ok(())
}

fn parse_doc(what: &str, text: &str) -> Result<serde_json::Value, Error> {
    serde_json::from_str(text).map_err(|e| Error::Request(format!("{what}: not JSON: {e}")))
}

/// Runs one `mcm local-cloud` subcommand; the admin ones print JSON to stdout.
pub async fn run(cmd: LocalCloudCommand) -> Result<(), Error> {
    let action = |a: InstanceArgs, act: InstanceAction| async move {
        let id = crate::wire::instance_id_of(&a.instance)
            .map(str::to_string)
            .unwrap_or(a.instance);
        let inst = AdminClient::new(&a.url.url)?
            .instance_action(&id, act)
            .await?;
        print_json(&inst)
    };
    match cmd {
        LocalCloudCommand::Serve(args) => serve(args).await,
        LocalCloudCommand::Stop(a) => action(a, InstanceAction::Stop).await,
        LocalCloudCommand::Kill(a) => action(a, InstanceAction::Kill).await,
        LocalCloudCommand::Start(a) => action(a, InstanceAction::Start).await,
        LocalCloudCommand::Instances(u) => {
            print_json(&AdminClient::new(&u.url)?.instances().await?)
        }
        LocalCloudCommand::Stats(u) => print_json(&AdminClient::new(&u.url)?.stats().await?),
        LocalCloudCommand::Faults(f) => {
            let c = AdminClient::new(&f.url.url)?;
            let t = match (f.patch, f.replace) {
                (Some(p), _) => c.patch_tunables(&parse_doc("--patch", &p)?).await?,
                (None, Some(r)) => c.put_tunables(&parse_doc("--replace", &r)?).await?,
                (None, None) => c.tunables().await?,
            };
            print_json(&t)
        }
    }
}
