//! Decoding the providerSpec JSON with the key matching of Go's `encoding/json`.
