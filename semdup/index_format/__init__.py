"""The index contract the writer (indexer) and the readers (reranker, evaluation) share: mapping,
packed fields, lexical documents and the mapping readers."""
