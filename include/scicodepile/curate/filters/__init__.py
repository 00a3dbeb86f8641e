"""Curate filters, one family per module: each answers ``Verdict(keep, reason)`` per record.

Repository filters (:mod:`.metadata`, :mod:`.license`, :mod:`.readme`, :mod:`.docs_only`) take a
repository view; file filters (:mod:`.files`) take an extracted file.
"""
