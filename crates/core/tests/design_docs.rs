//! The design pages name the functions that implement their claims, under
//! an `<!-- implemented-by -->` marker ("Implemented by"). Every page under
//! docs/design (the provider pages in docs/design/providers too) must carry
//! one, except the index (README.md). This check fails when a page has no
//! list or names a function, method or type that no longer exists in the
//! source tree, so a rename or a removal has to update the page.

use std::fs;
use std::path::{Path, PathBuf};

const MARKER: &str = "<!-- implemented-by";

/// The pages under docs/design that need no list: the index only links.
const EXEMPT: &[&str] = &["README.md"];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n == "target") {
                continue;
            }
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Every `*.md` under `dir`, in sub-folders too (unsorted).
fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            markdown_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "md") {
            out.push(p);
        }
    }
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Whether `text` has `keyword name` with `name` ending at a word boundary.
fn declares(text: &str, keyword: &str, name: &str) -> bool {
    let needle = format!("{keyword} {name}");
    text.match_indices(&needle).any(|(i, _)| {
        let before_ok = i == 0 || !text[..i].ends_with(is_ident_char);
        let after_ok = !text[i + needle.len()..].starts_with(is_ident_char);
        before_ok && after_ok
    })
}

fn declares_item(text: &str, name: &str) -> bool {
    [
        "fn", "struct", "enum", "trait", "type", "const", "static", "mod",
    ]
    .iter()
    .any(|k| declares(text, k, name))
}

/// Whether `text` implements (or declares as a trait) `ty`.
fn implements(text: &str, ty: &str) -> bool {
    declares(text, "trait", ty)
        || text.lines().any(|l| {
            let l = l.trim_start();
            l.starts_with("impl") && l.split(|c: char| !is_ident_char(c)).any(|word| word == ty)
        })
}

/// The backticked names listed after the marker, up to the next heading.
fn listed_names(page: &str) -> Option<Vec<String>> {
    let start = page.find(MARKER)?;
    let rest = &page[start..];
    let end = rest.find("\n## ").unwrap_or(rest.len());
    let block = &rest[..end];
    let mut names = Vec::new();
    let mut parts = block.split('`');
    parts.next();
    while let Some(inside) = parts.next() {
        let name = inside.trim_end_matches("()");
        if !name.is_empty()
            && name
                .split("::")
                .all(|seg| !seg.is_empty() && seg.chars().all(is_ident_char))
        {
            names.push(name.to_string());
        }
        parts.next();
    }
    Some(names)
}

fn exists(name: &str, sources: &[String]) -> bool {
    let segs: Vec<&str> = name.split("::").collect();
    let last = segs.last().copied().unwrap_or_default();
    let owner = segs
        .len()
        .checked_sub(2)
        .map(|i| segs[i])
        .filter(|s| s.starts_with(|c: char| c.is_ascii_uppercase()));
    match owner {
        Some(ty) => sources
            .iter()
            .any(|t| implements(t, ty) && declares(t, "fn", last)),
        None => sources.iter().any(|t| declares_item(t, last)),
    }
}

#[test]
fn every_design_page_names_its_functions_and_every_name_exists() {
    let root = repo_root();
    let mut files = Vec::new();
    rust_files(&root.join("crates"), &mut files);
    let sources: Vec<String> = files
        .iter()
        .filter_map(|p| fs::read_to_string(p).ok())
        .collect();
    assert!(
        sources.len() > 50,
        "the source tree was not found at {root:?}"
    );
    let docs = root.join("docs/design");
    let mut pages = Vec::new();
    markdown_files(&docs, &mut pages);
    pages.sort();
    assert!(
        pages.len() > 10,
        "the design pages were not found at {docs:?}"
    );
    assert!(
        pages
            .iter()
            .any(|p| p.parent().is_some_and(|d| d.ends_with("providers"))),
        "the provider pages (docs/design/providers) were not found"
    );
    let mut without_list = Vec::new();
    let mut missing = Vec::new();
    for page in &pages {
        let text = fs::read_to_string(page).unwrap_or_default();
        let file = page
            .strip_prefix(&docs)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let Some(names) = listed_names(&text) else {
            if !EXEMPT.contains(&file.as_str()) {
                without_list.push(format!("docs/design/{file}"));
            }
            continue;
        };
        assert!(
            !names.is_empty(),
            "{file}: the implemented-by list is empty"
        );
        for name in names {
            if !exists(&name, &sources) {
                missing.push(format!("{file}: `{name}`"));
            }
        }
    }
    assert!(
        without_list.is_empty(),
        "design pages without an implemented-by list:\n{}",
        without_list.join("\n")
    );
    assert!(
        missing.is_empty(),
        "design pages name functions that no longer exist:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_check_notices_a_name_that_does_not_exist() {
    let sources =
        vec!["impl Widget {\n    pub fn spin(&self) {}\n}\npub fn free() {}\n".to_string()];
    assert!(exists("Widget::spin", &sources));
    assert!(exists("free", &sources));
    assert!(!exists("Widget::stop", &sources));
    assert!(!exists("Gadget::spin", &sources));
    assert!(!exists("fre", &sources));
    let page = "# P\n\n## Implemented by\n\n<!-- implemented-by -->\n- `a::b`, `C::d()` and `not a name`\n\n## Next\n`e`\n";
    assert_eq!(
        listed_names(page),
        Some(vec!["a::b".to_string(), "C::d".to_string()])
    );
}
