"""The files floor: how interp reads and writes what it keeps on disk.

`validate` is the one checked reading of every file interp reads (each refusal names the file and the
field); `storage` is the one file format of every result type (`@result`, `save`, `load`), atomic
writes of files and folders, and the cache folder. Both sit below `interp.results` and
`interp.model`, and import only `interp.errors` and `interp.sites` (hook names read from a file are
checked as sites).
"""
