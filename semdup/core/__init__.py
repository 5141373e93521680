"""The torch-free base every other layer stands on: posts, errors, settings, the text pipeline,
input kinds, scoring maths and the official measures. Imports nothing from semdup above it."""
