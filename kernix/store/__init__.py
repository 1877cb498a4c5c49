"""The store: everything kernix keeps on disk, and the rules that keep it safe.

Layout under the cache root (see :func:`kernix.paths.cache_root`)::

    modules/<name>/<key[:32]>/manifest.json   what was built, and from what (manifest.py)
    modules/<name>/<key[:32]>/module-<sha>.so the library, named by its own hash
    modules/<name>/<key[:32]>/last-use        its last use (mtime), and its lease (usage.py)
    build/<name>/                              ninja's working directory (workdir.py)
    sources/<name>-<sha>.<ext>                 inline sources, written once (files.py)
    locks/<name>.lock                          held while <name> builds (lock.py)
    locks/.prune.lock                          held while the cache is pruned (prune.py)
    direct/<name or .parse>/<fingerprint>.rec  the direct index: answers remembered (direct.py)
    specs/<key[:2]>/<key>.rec                  inferred specs (kernix.frontend.speccache)
    toolchain/<kind>-<stamp>.rec               what compilers said about themselves (files.py)

The cache is kept within a size limit (limits.py) by evicting the least
recently used entries after each build (prune.py).

``.rec`` files are records (files.py: marshal'd plain data behind a magic
line, read without importing json); manifests are JSON.

Every directory is created private to the user (``0o755``, never writable by
others) and every file read back that can reach a compiler or the loader is
trust-checked first (:mod:`kernix.store.trust`).
"""
