//! Decoding a providerSpec (or a JSON document in a Secret) as the Go
//! providers' `encoding/json` does, with every departure from the canonical
//! spelling made visible (design: docs/design/driver.md, "Decoding").
//!
//! `json.Unmarshal` matches an object key to a struct field exactly or,
//! failing that, case-insensitively: `sizeGB` fills `sizeGb`, `IAM` fills
//! `iam`. Classes written that way work with the Go providers, so they work
//! here too. [`decode`] decodes any serde type from a JSON value with that
//! matching, using the field names serde's derive gives for each struct, and
//! reports:
//! - each key read under another spelling than its field's canonical one;
//! - each key that loses to another spelling of the same field;
//! - each key that names no field (Go ignores it silently; a typo should be
//!   seen, so it is a warning here).
//!
//! Which key wins when several spell the same field: Go decodes the keys in
//! document order, so the last one wins. The API server stores the
//! providerSpec with its keys sorted (byte order), which is the order every
//! Go provider reads them in; here too the key that sorts last wins, exact
//! or not, except that a `null` (a no-op in Go) loses to any other value.
//! Go would merge two spellings of an object-valued field; here the winner
//! alone is read (the loser is reported either way).
//!
//! A `null` value of a struct field is dropped before serde sees it: Go
//! leaves the field at its zero value, and serde's `default` gives the same.
//!
//! Only struct field names are matched this way: the keys of maps (tags,
//! labels, metadata) are the user's data and are kept exactly as written.
//! Types that serde buffers before decoding (untagged enums, `flatten`) see
//! their keys as written.

use serde::de::{
    self, value::StringDeserializer, DeserializeOwned, DeserializeSeed, Deserializer, MapAccess,
    SeqAccess, Visitor,
};
use serde_json::{Map, Value};
use std::cell::RefCell;
use std::fmt;

/// A key that decoding read, skipped or ignored, with the field it concerns.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyWarning {
    /// The key's path as written, e.g. `providerSpec.disks[0].sizeGB`.
    pub field: String,
    /// What happened to it and what to write instead.
    pub message: String,
}

impl fmt::Display for KeyWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// A value that does not decode into its type.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct DecodeError {
    /// The path of the value that failed, e.g. `providerSpec.disks[0].sizeGb`.
    pub field: String,
    /// serde's reason.
    pub message: String,
    /// The warnings gathered before the failure.
    pub warnings: Vec<KeyWarning>,
}

/// A decoded value and the warnings about its keys (sorted by field).
#[derive(Clone, Debug, PartialEq)]
pub struct Decoded<T> {
    /// The value.
    pub value: T,
    /// One warning per key read under another spelling, ignored or unknown.
    pub warnings: Vec<KeyWarning>,
}

/// A key as Go's `encoding/json` compares it when no field matches exactly:
/// ASCII letters in one case, and the two non-ASCII letters that fold onto
/// ASCII ones (`ſ` → `s`, the Kelvin sign `K` → `k`).
pub fn fold(key: &str) -> String {
    key.chars()
        .map(|c| match c {
            '\u{17F}' => 's',
            '\u{212A}' => 'k',
            c => c.to_ascii_lowercase(),
        })
        .collect()
}

/// Decodes `T` from `value` with Go's key matching; `root` names the value
/// in warnings and errors (`providerSpec`, `secretRef.serviceAccountJSON`).
pub fn decode<T: DeserializeOwned>(value: &Value, root: &str) -> Result<Decoded<T>, DecodeError> {
    let state = State::default();
    let out = T::deserialize(At {
        value,
        path: root.to_string(),
        pointer: Vec::new(),
        state: &state,
    });
    let State {
        warnings,
        failed_at,
        ..
    } = state;
    let mut warnings = warnings.into_inner();
    warnings.sort();
    match out {
        Ok(value) => Ok(Decoded { value, warnings }),
        Err(e) => Err(DecodeError {
            field: failed_at.into_inner().unwrap_or_else(|| root.to_string()),
            message: e.to_string(),
            warnings,
        }),
    }
}

/// `value` with every key that [`decode`] reads under another spelling
/// renamed to its field's canonical key and every losing spelling removed
/// (unknown keys stay), and the warnings [`decode`] gives. For comparing two
/// specs field by field whatever their spelling. A value that does not
/// decode is renamed as far as decoding got.
pub fn canonical_keys<T: DeserializeOwned>(value: &Value, root: &str) -> (Value, Vec<KeyWarning>) {
    let state = State::default();
    let _ = T::deserialize(At {
        value,
        path: root.to_string(),
        pointer: Vec::new(),
        state: &state,
    });
    let mut edits = state.edits.into_inner();
    // Deepest first: a parent's key is renamed after its children are.
    edits.sort_by_key(|e| std::cmp::Reverse(e.object.len()));
    let mut out = value.clone();
    for e in edits {
        let Some(Value::Object(map)) = locate(&mut out, &e.object) else {
            continue;
        };
        if let Some(v) = map.remove(&e.key) {
            if let Some(to) = e.rename_to {
                map.insert(to, v);
            }
        }
    }
    let mut warnings = state.warnings.into_inner();
    warnings.sort();
    (out, warnings)
}

fn locate<'v>(value: &'v mut Value, pointer: &[Step]) -> Option<&'v mut Value> {
    let mut at = value;
    for step in pointer {
        at = match (step, at) {
            (Step::Key(k), Value::Object(m)) => m.get_mut(k)?,
            (Step::Index(i), Value::Array(a)) => a.get_mut(*i)?,
            _ => return None,
        };
    }
    Some(at)
}

/// One step from a value to a child, by the key as written.
#[derive(Clone, Debug)]
enum Step {
    Key(String),
    Index(usize),
}

/// A key of the object at `object` to rename (`Some`) or drop (`None`).
struct Edit {
    object: Vec<Step>,
    key: String,
    rename_to: Option<String>,
}

#[derive(Default)]
struct State {
    warnings: RefCell<Vec<KeyWarning>>,
    edits: RefCell<Vec<Edit>>,
    /// The deepest path that failed (the first failure recorded).
    failed_at: RefCell<Option<String>>,
}

/// The deserializer of one JSON value at a path.
struct At<'a> {
    value: &'a Value,
    /// The path as shown to users (canonical field names).
    path: String,
    /// The path by the keys as written.
    pointer: Vec<Step>,
    state: &'a State,
}

impl<'a> At<'a> {
    fn child(&self, value: &'a Value, shown: String, step: Step) -> At<'a> {
        let mut pointer = self.pointer.clone();
        pointer.push(step);
        At {
            value,
            path: shown,
            pointer,
            state: self.state,
        }
    }

    fn warn(&self, key: &str, message: String) {
        self.state.warnings.borrow_mut().push(KeyWarning {
            field: format!("{}.{key}", self.path),
            message,
        });
    }

    fn edit(&self, key: &str, rename_to: Option<&str>) {
        self.state.edits.borrow_mut().push(Edit {
            object: self.pointer.clone(),
            key: key.to_string(),
            rename_to: rename_to.map(str::to_string),
        });
    }

    /// The entries of a map, keys as written.
    fn map_entries(&self, map: &'a Map<String, Value>) -> Entries<'a> {
        let entries = map
            .iter()
            .map(|(k, v)| {
                let child = self.child(v, format!("{}.{k}", self.path), Step::Key(k.clone()));
                (k.clone(), child)
            })
            .collect();
        Entries::new(entries)
    }

    /// The entries of a struct: each key matched to a field as Go matches
    /// it, one winner per field, warnings for the rest.
    fn struct_entries(&self, map: &'a Map<String, Value>, fields: &[&str]) -> Entries<'a> {
        // Byte order: the order the API server stores the keys in.
        let mut keys: Vec<&String> = map.keys().collect();
        keys.sort();
        // field index → the keys that spell it, in byte order.
        let mut spellings: Vec<Vec<&String>> = vec![Vec::new(); fields.len()];
        let mut unknown = Vec::new();
        for key in keys {
            let exact = fields.iter().position(|f| *f == key.as_str());
            let folded = || {
                let k = fold(key);
                fields.iter().position(|f| fold(f) == k)
            };
            match exact.or_else(folded) {
                Some(i) => spellings[i].push(key),
                None => unknown.push(key),
            }
        }
        let mut entries = Vec::new();
        for (i, keys) in spellings.iter().enumerate() {
            // A null is a no-op in Go (for a field that is no pointer): it
            // wins only when every spelling is null.
            let Some(winner) = keys
                .iter()
                .rev()
                .find(|k| map.get(k.as_str()).is_some_and(|v| !v.is_null()))
                .or(keys.last())
            else {
                continue;
            };
            let name = fields[i];
            for other in keys.iter().filter(|k| *k != winner) {
                self.warn(
                    other,
                    format!(
                        "ignored: {}.{winner} spells the same field {name} and wins (the key that sorts last wins, as in Go); write {name} once",
                        self.path
                    ),
                );
                self.edit(other, None);
            }
            if winner.as_str() != name {
                self.warn(
                    winner,
                    format!(
                        "read as {name}, as Go's encoding/json matches keys case-insensitively; write {name}, the canonical key"
                    ),
                );
                self.edit(winner, Some(name));
            }
            let Some(value) = map.get(winner.as_str()) else {
                continue;
            };
            if value.is_null() {
                // Go leaves the field at its zero value.
                continue;
            }
            let child = self.child(
                value,
                format!("{}.{name}", self.path),
                Step::Key((*winner).clone()),
            );
            entries.push((name.to_string(), child));
        }
        for key in unknown {
            self.warn(
                key,
                "unknown field, ignored (the Go provider ignores it too): check its spelling"
                    .to_string(),
            );
            // Passed on, so that a type that refuses unknown fields still can.
            if let Some(value) = map.get(key.as_str()) {
                let child = self.child(
                    value,
                    format!("{}.{key}", self.path),
                    Step::Key(key.clone()),
                );
                entries.push((key.clone(), child));
            }
        }
        Entries::new(entries)
    }

    fn seq(&self, items: &'a [Value]) -> Items<'a> {
        Items {
            items: items
                .iter()
                .enumerate()
                .map(|(i, v)| self.child(v, format!("{}[{i}]", self.path), Step::Index(i)))
                .collect::<Vec<_>>()
                .into_iter(),
        }
    }
}

/// Records where a failure happened (the innermost value reports first).
fn note_failure<T>(
    state: &State,
    path: &str,
    r: Result<T, serde_json::Error>,
) -> Result<T, serde_json::Error> {
    if r.is_err() {
        let mut at = state.failed_at.borrow_mut();
        if at.is_none() {
            *at = Some(path.to_string());
        }
    }
    r
}

struct Entries<'a> {
    entries: std::vec::IntoIter<(String, At<'a>)>,
    next_value: Option<At<'a>>,
}

impl<'a> Entries<'a> {
    fn new(entries: Vec<(String, At<'a>)>) -> Self {
        Entries {
            entries: entries.into_iter(),
            next_value: None,
        }
    }
}

impl<'de> MapAccess<'de> for Entries<'de> {
    type Error = serde_json::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Self::Error> {
        match self.entries.next() {
            Some((key, value)) => {
                self.next_value = Some(value);
                seed.deserialize(StringDeserializer::<serde_json::Error>::new(key))
                    .map(Some)
            }
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, Self::Error> {
        match self.next_value.take() {
            Some(at) => {
                let (state, path) = (at.state, at.path.clone());
                note_failure(state, &path, seed.deserialize(at))
            }
            None => Err(de::Error::custom("a value was asked for before its key")),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

struct Items<'a> {
    items: std::vec::IntoIter<At<'a>>,
}

impl<'de> SeqAccess<'de> for Items<'de> {
    type Error = serde_json::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Self::Error> {
        match self.items.next() {
            Some(at) => {
                let (state, path) = (at.state, at.path.clone());
                note_failure(state, &path, seed.deserialize(at)).map(Some)
            }
            None => Ok(None),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

/// Scalars are decoded by serde_json's own `Value` deserializer.
macro_rules! by_value {
    ($($method:ident)*) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
                self.value.$method(visitor)
            }
        )*
    };
}

impl<'de> Deserializer<'de> for At<'de> {
    type Error = serde_json::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.value {
            Value::Object(map) => visitor.visit_map(self.map_entries(map)),
            Value::Array(items) => visitor.visit_seq(self.seq(items)),
            other => other.deserialize_any(visitor),
        }
    }

    by_value! {
        deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64
        deserialize_i128 deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64
        deserialize_u128 deserialize_f32 deserialize_f64 deserialize_char deserialize_str
        deserialize_string deserialize_bytes deserialize_byte_buf deserialize_unit
        deserialize_identifier deserialize_ignored_any
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.value {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.value.deserialize_unit_struct(name, visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.value {
            Value::Array(items) => visitor.visit_seq(self.seq(items)),
            other => other.deserialize_seq(visitor),
        }
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.value {
            Value::Object(map) => visitor.visit_map(self.map_entries(map)),
            other => other.deserialize_map(visitor),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        match self.value {
            Value::Object(map) => visitor.visit_map(self.struct_entries(map, fields)),
            other => other.deserialize_struct(name, fields, visitor),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.value.deserialize_enum(name, variants, visitor)
    }
}

#[cfg(test)]
mod tests;
