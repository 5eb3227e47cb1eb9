"""SGLang's KV pool before anyone runs SGLang: the default memory fraction per release and the pool it sizes."""
