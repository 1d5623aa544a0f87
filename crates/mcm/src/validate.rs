//! `mcm validate -f <files…>`: decodes and validates MachineClasses and their
//! Secrets offline with the drivers' own code ([`mcm_driver::Driver::check_class`]),
//! so that an operator can check every class of a running Gardener seed
//! before swapping images. Prints each error and warning with the field it
//! concerns; never a Secret value. Exit code non-zero when a class has errors
//! (design: docs/design/driver.md, "Decoding").

use anyhow::Context as _;
use clap::Args;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use mcm_api::MachineClass;
use mcm_driver::{ClassCheck, Driver, Finding};
use serde::Deserialize as _;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

/// Flags of `mcm validate`.
#[derive(Args, Debug, Clone)]
pub struct ValidateArgs {
    /// YAML files (several documents each, `---`-separated, or `List`s)
    /// holding MachineClasses and the Secrets their `secretRef` and
    /// `credentialsSecretRef` name. Other kinds are skipped.
    #[arg(short = 'f', long = "filename", required = true, num_args = 1..)]
    pub files: Vec<PathBuf>,
}

/// The objects read from the files.
#[derive(Default)]
pub struct Objects {
    /// Each class with the file it came from.
    pub classes: Vec<(String, MachineClass)>,
    /// Each Secret.
    pub secrets: Vec<Secret>,
}

impl Objects {
    /// Adds the MachineClasses and Secrets of one YAML text (`source` names it).
    pub fn add_yaml(&mut self, source: &str, text: &str) -> anyhow::Result<()> {
        for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
            let value = serde_json::Value::deserialize(doc)
                .with_context(|| format!("{source}: document {} is not YAML", i + 1))?;
            self.add_value(source, value)
                .with_context(|| format!("{source}: document {}", i + 1))?;
        }
        Ok(())
    }

    fn add_value(&mut self, source: &str, value: serde_json::Value) -> anyhow::Result<()> {
        let kind = value
            .get("kind")
            .and_then(|k| k.as_str())
            .unwrap_or_default();
        match kind {
            "MachineClass" => {
                let class: MachineClass =
                    serde_json::from_value(value).context("not a MachineClass")?;
                self.classes.push((source.to_string(), class));
            }
            // Never echo a Secret's parse error: it could quote a value.
            "Secret" => self.secrets.push(
                serde_json::from_value(value)
                    .map_err(|_| anyhow::anyhow!("a Secret that does not decode"))?,
            ),
            "List" => {
                if let Some(serde_json::Value::Array(items)) = value.get("items") {
                    for item in items.clone() {
                        self.add_value(source, item)?;
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// The Secret `namespace/name` (a Secret without a namespace matches any).
    fn secret(&self, namespace: &str, name: &str) -> Option<&Secret> {
        self.secrets.iter().find(|s| {
            s.metadata.name.as_deref() == Some(name)
                && s.metadata
                    .namespace
                    .as_deref()
                    .is_none_or(|ns| ns.is_empty() || namespace.is_empty() || ns == namespace)
        })
    }

    /// The data of the class's `secretRef` then `credentialsSecretRef`
    /// (later keys win; `stringData` over `data`, as the API server merges
    /// them), and an error per referenced Secret not among the files.
    fn merged_secret(&self, class: &MachineClass) -> (Secret, Vec<Finding>) {
        let class_ns = class.metadata.namespace.clone().unwrap_or_default();
        let mut data: BTreeMap<String, ByteString> = BTreeMap::new();
        let mut missing = Vec::new();
        for (field, r) in [
            ("secretRef", &class.secret_ref),
            ("credentialsSecretRef", &class.credentials_secret_ref),
        ] {
            let Some(r) = r else { continue };
            let name = r.name.clone().unwrap_or_default();
            let ns = r
                .namespace
                .clone()
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| class_ns.clone());
            match self.secret(&ns, &name) {
                Some(s) => {
                    data.extend(s.data.clone().unwrap_or_default());
                    for (k, v) in s.string_data.clone().unwrap_or_default() {
                        data.insert(k, ByteString(v.into_bytes()));
                    }
                }
                None => missing.push(Finding::new(
                    field,
                    format!("Secret {ns}/{name} is not among the given files"),
                )),
            }
        }
        let secret = Secret {
            data: Some(data),
            ..Default::default()
        };
        (secret, missing)
    }

    /// Every Secret value of the files, as text (to keep out of the report).
    fn secret_values(&self) -> Vec<String> {
        let mut out = Vec::new();
        for s in &self.secrets {
            for v in s.data.iter().flat_map(|d| d.values()) {
                out.push(String::from_utf8_lossy(&v.0).into_owned());
            }
            for v in s.string_data.iter().flat_map(|d| d.values()) {
                out.push(v.clone());
            }
        }
        out
    }
}

/// The check of one class.
pub struct ClassReport {
    /// `namespace/name` of the class.
    pub class: String,
    /// The file it came from.
    pub source: String,
    /// Its provider.
    pub provider: String,
    /// What was found.
    pub check: ClassCheck,
}

/// Checks every class with the driver its `provider` names.
pub fn check_all(
    objects: &Objects,
    driver_for: &dyn Fn(&str) -> Option<Arc<dyn Driver>>,
) -> Vec<ClassReport> {
    objects
        .classes
        .iter()
        .map(|(source, class)| {
            let (secret, missing) = objects.merged_secret(class);
            let mut check = match Some(class.provider.as_str())
                .filter(|p| !p.is_empty())
                .and_then(driver_for)
            {
                Some(driver) => driver.check_class(class, &secret),
                None => ClassCheck {
                    errors: vec![Finding::new(
                        "provider",
                        format!(
                            "{:?}: no driver of this build serves this provider",
                            class.provider
                        ),
                    )],
                    warnings: Vec::new(),
                },
            };
            let mut errors = missing;
            errors.append(&mut check.errors);
            check.errors = errors;
            ClassReport {
                class: format!(
                    "{}/{}",
                    class.metadata.namespace.as_deref().unwrap_or("default"),
                    class.metadata.name.as_deref().unwrap_or_default()
                ),
                source: source.clone(),
                provider: class.provider.clone(),
                check,
            }
        })
        .collect()
}

/// The report as printed: one block per class, each error and warning on
/// its own line with its field, then a summary line. Every Secret value of
/// `objects` (and every long word of one) is replaced by `<redacted>`, should
/// a driver's message ever quote one.
pub fn render(reports: &[ClassReport], objects: &Objects) -> String {
    let mut out = String::new();
    for r in reports {
        let (e, w) = (r.check.errors.len(), r.check.warnings.len());
        let verdict = if e == 0 { "ok" } else { "INVALID" };
        let _ = writeln!(
            out,
            "MachineClass {} (provider {:?}, {}): {verdict}, {e} error(s), {w} warning(s)",
            r.class, r.provider, r.source
        );
        for f in &r.check.errors {
            let _ = writeln!(out, "  error:   {f}");
        }
        for f in &r.check.warnings {
            let _ = writeln!(out, "  warning: {f}");
        }
    }
    let invalid = reports.iter().filter(|r| !r.check.is_ok()).count();
    let _ = writeln!(
        out,
        "{} MachineClass(es) checked, {invalid} with errors",
        reports.len()
    );
    redact(out, &objects.secret_values())
}

/// `text` with every secret value, and every word of 8 or more characters
/// of one, replaced by `<redacted>`.
fn redact(mut text: String, values: &[String]) -> String {
    let mut needles: Vec<&str> = Vec::new();
    for v in values {
        let v = v.trim();
        if v.len() >= 4 {
            needles.push(v);
        }
        needles.extend(
            v.split(|c: char| c.is_whitespace() || "\"',:{}[]".contains(c))
                .filter(|w| w.len() >= 8),
        );
    }
    // Longest first, so that a value is replaced whole before its words.
    needles.sort_by_key(|n| std::cmp::Reverse(n.len()));
    needles.dedup();
    for n in needles {
        if text.contains(n) {
            text = text.replace(n, "<redacted>");
        }
    }
    text
}

/// Runs `mcm validate`: prints the report, fails when a class has errors.
pub fn run(args: &ValidateArgs, providers: &crate::drivers::ProviderArgs) -> anyhow::Result<()> {
    let mut objects = Objects::default();
    for f in &args.files {
        let text =
            std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        objects.add_yaml(&f.display().to_string(), &text)?;
    }
    if objects.classes.is_empty() {
        anyhow::bail!("no MachineClass in the given files");
    }
    let registry = crate::drivers::registry(providers)?;
    let reports = check_all(&objects, &|p| registry.get(Some(p)));
    print!("{}", render(&reports, &objects));
    let invalid = reports.iter().filter(|r| !r.check.is_ok()).count();
    if invalid > 0 {
        anyhow::bail!(
            "{invalid} of {} MachineClass(es) have errors",
            reports.len()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests;
