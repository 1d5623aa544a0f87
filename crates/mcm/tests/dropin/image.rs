//! The container image as `deploy/Dockerfile` declares it, laid out in a
//! folder so that a test starts the binary the way a container runtime would:
//! the final stage's `WORKDIR`, `ENTRYPOINT` and `CMD`, and the files the
//! build stage puts under `/out` (`cp target/release/mcm /out/<path>`,
//! `ln -s <target> /out/<link>`) copied to `/` by `COPY --from=build /out/ /`.
//!
//! A Kubernetes container's `command` replaces the entrypoint and its `args`
//! replace the `CMD`; no `workingDir` means the image's. The base image's
//! working directory is modelled (distroless `:nonroot` starts in
//! `/home/nonroot`), so a Dockerfile without `WORKDIR /` fails here as
//! Gardener's `./machine-controller-manager` fails in a cluster.

use std::path::{Path, PathBuf};

/// The working directory of distroless `:nonroot` images.
const NONROOT_HOME: &str = "/home/nonroot";

/// The metadata of the Dockerfile's final stage and the files of the image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageSpec {
    /// `WORKDIR` of the final stage, or the base image's.
    pub workdir: String,
    /// `ENTRYPOINT` (exec form).
    pub entrypoint: Vec<String>,
    /// `CMD` (exec form).
    pub cmd: Vec<String>,
    /// Paths in the image that are the binary (`cp target/release/mcm /out/…`).
    pub binaries: Vec<String>,
    /// Symbolic links in the image: (link, target).
    pub links: Vec<(String, String)>,
}

fn exec_form(rest: &str) -> Vec<String> {
    serde_json::from_str(rest.trim()).expect("ENTRYPOINT/CMD in exec form (a JSON array)")
}

/// The logical lines of a Dockerfile (continuations joined, comments dropped).
fn logical_lines(text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut current = String::new();
    for raw in text.lines() {
        let l = raw.trim();
        if l.starts_with('#') || (l.is_empty() && current.is_empty()) {
            continue;
        }
        if let Some(head) = l.strip_suffix('\\') {
            current.push_str(head);
            current.push(' ');
        } else {
            current.push_str(l);
            lines.push(std::mem::take(&mut current));
        }
    }
    lines
}

/// Parses the Dockerfile: the final stage's metadata (inherited through
/// `FROM <stage>`) and the files the build stage writes under `/out`.
pub fn parse(text: &str) -> ImageSpec {
    #[derive(Clone, Default)]
    struct Stage {
        name: String,
        workdir: Option<String>,
        entrypoint: Vec<String>,
        cmd: Vec<String>,
    }
    let mut stages: Vec<Stage> = Vec::new();
    let (mut binaries, mut links) = (Vec::new(), Vec::new());
    for line in logical_lines(text) {
        let (instr, rest) = line.split_once(' ').unwrap_or((line.as_str(), ""));
        match instr.to_ascii_uppercase().as_str() {
            "FROM" => {
                let words: Vec<&str> = rest.split_whitespace().collect();
                let base = words.first().copied().unwrap_or_default();
                let name = match words.as_slice() {
                    [_, as_, n] if as_.eq_ignore_ascii_case("as") => n.to_string(),
                    _ => String::new(),
                };
                let mut stage = stages
                    .iter()
                    .find(|s| s.name == base)
                    .cloned()
                    .unwrap_or_else(|| Stage {
                        workdir: base.contains(":nonroot").then(|| NONROOT_HOME.into()),
                        ..Stage::default()
                    });
                stage.name = name;
                stages.push(stage);
            }
            "WORKDIR" => {
                if let Some(s) = stages.last_mut() {
                    s.workdir = Some(rest.trim().to_string());
                }
            }
            "ENTRYPOINT" => {
                if let Some(s) = stages.last_mut() {
                    s.entrypoint = exec_form(rest);
                    s.cmd.clear();
                }
            }
            "CMD" => {
                if let Some(s) = stages.last_mut() {
                    s.cmd = exec_form(rest);
                }
            }
            "RUN" => {
                for cmd in rest.split("&&") {
                    let words: Vec<&str> = cmd.split_whitespace().collect();
                    match words.as_slice() {
                        ["cp", "target/release/mcm", to] => {
                            if let Some(p) = to.strip_prefix("/out") {
                                binaries.push(p.to_string());
                            }
                        }
                        ["ln", "-s", target, link] => {
                            if let Some(p) = link.strip_prefix("/out") {
                                links.push((p.to_string(), target.to_string()));
                            }
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    let last = stages.last().cloned().unwrap_or_default();
    ImageSpec {
        workdir: last.workdir.unwrap_or_else(|| "/".into()),
        entrypoint: last.entrypoint,
        cmd: last.cmd,
        binaries,
        links,
    }
}

/// `deploy/Dockerfile` of this repository.
pub fn repository_image() -> ImageSpec {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/Dockerfile");
    parse(&std::fs::read_to_string(&path).expect("deploy/Dockerfile"))
}

/// An image laid out under a root folder.
pub struct ImageRoot {
    pub spec: ImageSpec,
    pub root: PathBuf,
}

/// How a container of the image starts: the host path to execute, its
/// `argv[0]` and arguments, and the host working directory.
#[derive(Debug)]
pub struct Start {
    pub program: PathBuf,
    pub argv0: String,
    pub args: Vec<String>,
    pub cwd: PathBuf,
}

impl ImageRoot {
    /// Lays the image out under `root`: each binary path a link to `binary`,
    /// each link pointing to its target inside the root, the base image's
    /// home folder.
    pub fn install(spec: ImageSpec, root: &Path, binary: &Path) -> ImageRoot {
        let inside = |p: &str| root.join(p.trim_start_matches('/'));
        std::fs::create_dir_all(inside(NONROOT_HOME)).expect("home");
        for b in &spec.binaries {
            let at = inside(b);
            std::fs::create_dir_all(at.parent().expect("parent")).expect("dirs");
            std::os::unix::fs::symlink(binary, &at).expect("binary");
        }
        for (link, target) in &spec.links {
            let at = inside(link);
            std::fs::create_dir_all(at.parent().expect("parent")).expect("dirs");
            let to = if target.starts_with('/') {
                inside(target)
            } else {
                PathBuf::from(target)
            };
            std::os::unix::fs::symlink(to, &at).expect("link");
        }
        ImageRoot {
            spec,
            root: root.to_path_buf(),
        }
    }

    fn inside(&self, p: &str) -> PathBuf {
        self.root.join(p.trim_start_matches('/'))
    }

    /// A container of this image with Kubernetes' `command`, `args` and
    /// `workingDir`; `Err` with the runtime's complaint when the executable
    /// is not in the image.
    pub fn start(
        &self,
        command: &[String],
        args: &[String],
        working_dir: Option<&str>,
    ) -> Result<Start, String> {
        let mut argv: Vec<String> = if command.is_empty() {
            self.spec.entrypoint.clone()
        } else {
            command.to_vec()
        };
        if !args.is_empty() {
            argv.extend(args.iter().cloned());
        } else if command.is_empty() {
            argv.extend(self.spec.cmd.iter().cloned());
        }
        let workdir = working_dir.unwrap_or(&self.spec.workdir).to_string();
        let cwd = self.inside(&workdir);
        let Some((argv0, rest)) = argv.split_first() else {
            return Err("no command and no entrypoint".into());
        };
        let program = if argv0.starts_with('/') {
            self.inside(argv0)
        } else if argv0.contains('/') {
            cwd.join(argv0)
        } else {
            ["/usr/local/bin", "/usr/bin", "/bin"]
                .iter()
                .map(|d| self.inside(d).join(argv0))
                .find(|p| p.exists())
                .unwrap_or_else(|| PathBuf::from(argv0))
        };
        if !program.exists() {
            return Err(format!(
                "exec: {argv0:?}: no such file or directory (working directory {workdir})"
            ));
        }
        Ok(Start {
            program,
            argv0: argv0.clone(),
            args: rest.to_vec(),
            cwd,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OLD: &str = r#"
FROM docker.io/library/rust:1-bookworm AS build
RUN cargo build \
    && cp target/release/mcm /out/usr/local/bin/mcm \
    && ln -s /usr/local/bin/mcm /out/machine-controller-manager
FROM gcr.io/distroless/cc-debian12:nonroot AS mcm
COPY --from=build /out/ /
ENTRYPOINT ["/usr/local/bin/mcm"]
CMD ["run"]
FROM mcm
"#;

    #[test]
    fn a_nonroot_base_without_workdir_starts_in_home_nonroot() {
        let spec = parse(OLD);
        assert_eq!(spec.workdir, NONROOT_HOME);
        assert_eq!(spec.entrypoint, ["/usr/local/bin/mcm"]);
        assert_eq!(spec.cmd, ["run"]);
        assert_eq!(spec.binaries, ["/usr/local/bin/mcm"]);
        assert_eq!(
            spec.links,
            [(
                "/machine-controller-manager".to_string(),
                "/usr/local/bin/mcm".to_string()
            )]
        );
    }
}
