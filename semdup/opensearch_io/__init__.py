"""semdup's OpenSearch I/O: the client factory, the one error boundary and the bulk writer, above the pure base
(:mod:`semdup.core`) and below every package that reads or writes an index. See README.md in this folder."""
