"""Audit reports: JSON for machines, Markdown for people."""

from .json_report import read_json, to_jsonable, write_json
from .markdown import render_markdown

__all__ = ["read_json", "render_markdown", "to_jsonable", "write_json"]
