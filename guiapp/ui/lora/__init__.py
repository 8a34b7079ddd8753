"""The LoRA page's tabs: each a form over its scroll area with its action bar below."""
