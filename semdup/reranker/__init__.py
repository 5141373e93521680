"""reranker"""
