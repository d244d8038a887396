"""`python -m reluexp`: the same as the `reluexp` console script."""

from reluexp.cli import main

if __name__ == "__main__":
    main()
