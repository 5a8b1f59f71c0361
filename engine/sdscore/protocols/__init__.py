"""Protocols: one subpackage per evaluation method, each shaped prepare → score → evaluate.

Protocols never import each other; shared logic lives in features/, metrics/ and runtime/.
"""
