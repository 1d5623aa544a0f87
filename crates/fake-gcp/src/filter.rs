//! The subset of Compute list filters the fake understands: one or more
//! comparisons `field op value`, optionally in parentheses, all of which
//! must hold (`AND` may stand between them). `op` is `=`, `!=`, `eq` or `ne`
//! (`eq`/`ne` compare whole values, without regular expressions). `field`
//! is a dotted path (`name`, `status`, `labels.env`, `tags.items`); on an
//! array, a comparison holds when any element matches. Values may be quoted.

use serde_json::Value;

/// A parsed filter.
#[derive(Clone, Debug, PartialEq)]
pub struct Filter {
    terms: Vec<Term>,
}

#[derive(Clone, Debug, PartialEq)]
struct Term {
    path: Vec<String>,
    negate: bool,
    value: String,
}

fn tokens(s: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    while let Some(&c) = chars.peek() {
        match c {
            c if c.is_whitespace() || c == '(' || c == ')' => {
                chars.next();
            }
            '"' | '\'' => {
                chars.next();
                let mut v = String::new();
                loop {
                    match chars.next() {
                        Some(q) if q == c => break,
                        Some(x) => v.push(x),
                        None => return Err(format!("unterminated quote in filter {s:?}")),
                    }
                }
                out.push(v);
            }
            '!' | '=' => {
                let mut op = String::new();
                while let Some(&x) = chars.peek() {
                    if x == '!' || x == '=' {
                        op.push(x);
                        chars.next();
                    } else {
                        break;
                    }
                }
                out.push(op);
            }
            _ => {
                let mut v = String::new();
                while let Some(&x) = chars.peek() {
                    if x.is_whitespace() || "()!=\"'".contains(x) {
                        break;
                    }
                    v.push(x);
                    chars.next();
                }
                out.push(v);
            }
        }
    }
    Ok(out)
}

impl Filter {
    /// Parses a filter; `Err` describes what is not understood.
    pub fn parse(s: &str) -> Result<Filter, String> {
        let toks = tokens(s)?;
        let mut terms = Vec::new();
        let mut i = 0;
        while i < toks.len() {
            if toks[i] == "AND" {
                i += 1;
                continue;
            }
            let (Some(field), Some(op), Some(value)) =
                (toks.get(i), toks.get(i + 1), toks.get(i + 2))
            else {
                return Err(format!("Invalid list filter expression {s:?}"));
            };
            let negate = match op.as_str() {
                "=" | "eq" => false,
                "!=" | "ne" => true,
                other => return Err(format!("Invalid operator {other:?} in filter {s:?}")),
            };
            terms.push(Term {
                path: field.split('.').map(str::to_string).collect(),
                negate,
                value: value.clone(),
            });
            i += 3;
        }
        Ok(Filter { terms })
    }

    /// Whether a resource matches every term.
    pub fn matches(&self, resource: &Value) -> bool {
        self.terms.iter().all(|t| {
            let mut found = Vec::new();
            collect(resource, &t.path, &mut found);
            let hit = found
                .iter()
                .any(|v| scalar(v).as_deref() == Some(t.value.as_str()));
            hit != t.negate
        })
    }
}

fn collect<'a>(v: &'a Value, path: &[String], out: &mut Vec<&'a Value>) {
    match (v, path.split_first()) {
        (Value::Array(items), _) => items.iter().for_each(|i| collect(i, path, out)),
        (_, None) => out.push(v),
        (Value::Object(o), Some((head, rest))) => {
            if let Some(next) = o.get(head) {
                collect(next, rest, out);
            }
        }
        _ => {}
    }
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vm() -> Value {
        json!({
            "name": "m-1",
            "status": "RUNNING",
            "labels": {"env": "prod"},
            "tags": {"items": ["kubernetes-io-cluster-a", "kubernetes-io-role-node"]}
        })
    }

    #[test]
    fn equality_and_inequality_on_fields_labels_and_repeated_tags() {
        assert!(Filter::parse("name = \"m-1\"").unwrap().matches(&vm()));
        assert!(Filter::parse("name != m-2").unwrap().matches(&vm()));
        assert!(Filter::parse("labels.env = prod").unwrap().matches(&vm()));
        assert!(Filter::parse("tags.items = kubernetes-io-role-node")
            .unwrap()
            .matches(&vm()));
        assert!(!Filter::parse("tags.items = kubernetes-io-cluster-b")
            .unwrap()
            .matches(&vm()));
    }

    #[test]
    fn several_terms_must_all_hold() {
        let f = Filter::parse("(status = RUNNING) AND (labels.env eq 'prod')").unwrap();
        assert!(f.matches(&vm()));
        let f = Filter::parse("(status = RUNNING) (name = other)").unwrap();
        assert!(!f.matches(&vm()));
    }

    #[test]
    fn malformed_filters_are_rejected() {
        assert!(Filter::parse("name =").is_err());
        assert!(Filter::parse("name ~ x").is_err());
        assert!(Filter::parse("name = \"open").is_err());
    }
}
