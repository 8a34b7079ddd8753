"""Facts the whole product shares (dtypes, tensor roles, choice lists, the Hub in use), as plain data: no torch, nothing of the product."""
