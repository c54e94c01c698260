"""Forge scheduler: queue and admission, executors, stop handling, final states."""
