// Package architecture holds no code: its test keeps the import graph in
// the layers docs/ARCHITECTURE.md names. An import may run down a layer
// or stay within one, never up; test support is imported only by tests;
// every package of the module has a row in the document's package table,
// and kv does not depend on a storage engine.
//
// It owns that check and the parsing of the table. It must never be
// imported.
package architecture
