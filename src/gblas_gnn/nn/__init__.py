"""Layers and models written against the executor interface."""

from .module import Module

__all__ = ["Module"]
