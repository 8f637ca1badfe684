import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # python/: the fusejit package of this checkout
# Keep the user's kernel cache out of test runs unless one is given.
os.environ.setdefault("FUSEJIT_CACHE_DIR", "off")
