#!/usr/bin/perl
# counter.pl: the hit counter of counter.cgi (cgi-examples/counter), in
# Perl, for hosts where a Perl CGI is easier to install than a binary. It
# answers the same URLs with the same statuses and bodies, and keeps its
# counts in the same files, so that both can count one counter together.
#
#   GET counter.pl?id=NAME[&format=text|json|svg][&peek=1]   (HEAD never counts)
#
# Installing it (docs/cgi-guide.md has the server side):
#   cgi-bin/counter.pl        this file, mode 0755 (named counter.cgi where the
#                             server runs only .cgi files as programs)
#   cgi-bin/Tokenlock.pm      bindings/perl/lib/Tokenlock.pm and the directory
#   cgi-bin/Tokenlock/        Tokenlock/ beside it, both beside this file or
#                             both in cgi-bin/lib/
# Nothing else: the module counts natively and starts no process, so the
# tokenlock command is not needed.
# It looks for the module in its own directory, then in lib/ there, then
# (in the source tree) in ../../bindings/perl/lib: the directories
# `use lib $FindBin::Bin, "$FindBin::Bin/lib"` would give, found without
# loading FindBin, which with Cwd and File::Spec costs about 10 ms of CPU
# per hit on a 2-core VM, where a counting hit takes about 19 ms without it.
#
# Configuration, from the environment as for counter.cgi:
#   TOKENLOCK_COUNTER_DIR      data directory, outside the web root
#                              (default /var/lib/tokenlock-counter)
#   TOKENLOCK_COUNTER_WAIT_MS  how long a hit waits for a busy counter before
#                              503 (default 5000; 0 to 600000)
#   TOKENLOCK_COUNTER_SYNC     none, file or file_and_dir (default)
#   TOKENLOCK_COUNTER_GROUP    the one group the counters' locks are shared
#                              with (the module's group option): lock
#                              directories of its members are trusted, and
#                              those made get it (docs/security.md)
# Counter NAME is DIR/NAME.count, locked by DIR/NAME.count.lock.
# TOKENLOCK_COUNTER_LOCK (and its older names TOKENLOCK_COUNTER_REDIS and
# _ETCD), which places counter.cgi's locks elsewhere, is refused (500).

use strict;
use warnings;

# The script's directory, as FindBin's $Bin. Under suEXEC the script runs
# by its bare name in its own directory: then '.', which stays right since
# the script never changes directories.
my $HERE;
BEGIN { $HERE = __FILE__ =~ m{\A(.*)/[^/]*\z}s ? (length $1 ? $1 : '/') : '.' }
use lib $HERE, "$HERE/lib", "$HERE/../../bindings/perl/lib";

my $NAME        = 'counter.pl';
my $DEFAULT_DIR = '/var/lib/tokenlock-counter';

# Limits of counter.cgi's query parser (cgi-examples/counter/cgi.hpp).
my $MAX_QUERY  = 2048;
my $MAX_PARAMS = 16;
my $MAX_NAME   = 32;
my $MAX_VALUE  = 256;

my %REASON = (
    200 => 'OK',
    400 => 'Bad Request',
    405 => 'Method Not Allowed',
    500 => 'Internal Server Error',
    503 => 'Service Unavailable',
);

# Details go to the server's error log, one line each; responses never
# show a path.
sub log_line {
    my ($text) = @_;
    $text =~ s/\s*\n\s*/ /g;
    print STDERR "$NAME: $text\n";
}

# A value from the query string or the environment as a response or the
# log may show it, as counter.cgi shows it: printable ASCII but markup as
# it is, every other byte as \xNN, at most 64 bytes, so that it can neither
# drive a terminal, forge a log line, nor become markup.
sub shown {
    my ($v) = @_;
    my $out = substr($v, 0, 64);
    $out =~ s{([^A-Za-z0-9 _\-.,:/=+\@%])}{sprintf('\\x%02x', ord $1)}ge;
    return length $v > 64 ? "$out..." : $out;
}

sub text {
    my ($status, $body, @headers) = @_;
    return { status => $status, type => 'text/plain; charset=utf-8', body => "$body\n", headers => \@headers };
}

sub respond {
    my ($r, $head_only) = @_;
    binmode STDOUT;
    my $out = "Status: $r->{status} " . ($REASON{ $r->{status} } || 'Unknown') . "\r\n"
      . "Content-Type: $r->{type}\r\n"
      . 'Content-Length: ' . length($r->{body}) . "\r\n"
      . "Cache-Control: no-store\r\n"
      # A browser must not guess a type: a 400 body holds query text.
      . "X-Content-Type-Options: nosniff\r\n";
    $out .= "$_->[0]: $_->[1]\r\n" for @{ $r->{headers} || [] };
    $out .= "\r\n";
    $out .= $r->{body} unless $head_only;
    print $out;
}

# A request body is never used, but it is read (up to a bound) before the
# response: a CGI that exits while the server still writes the body to its
# standard input makes Apache reset the connection instead of answering.
sub drain_request_body {
    my ($left) = (defined $ENV{CONTENT_LENGTH} ? $ENV{CONTENT_LENGTH} : '') =~ /\A\s*\+?(\d+)/;
    return unless $left;
    $left = 1 << 20 if $left > 1 << 20;
    binmode STDIN;
    while ($left > 0) {
        my $n = read(STDIN, my $buf, $left > 4096 ? 4096 : $left);
        last unless $n;
        $left -= $n;
    }
}

sub load_config {
    my %c = (dir => $DEFAULT_DIR, wait_ms => 5000, sync => 'file_and_dir');
    my $env = sub { my $v = $ENV{ $_[0] }; defined $v && length $v ? $v : undef };
    $c{dir} = $env->('TOKENLOCK_COUNTER_DIR') if defined $env->('TOKENLOCK_COUNTER_DIR');
    if (defined(my $w = $env->('TOKENLOCK_COUNTER_WAIT_MS'))) {
        # What strtol accepts: blanks, a sign, decimal digits.
        return (undef, 'TOKENLOCK_COUNTER_WAIT_MS must be 0 to 600000 milliseconds, not "' . shown($w) . '"')
          unless $w =~ /\A\s*([+-]?)(\d+)\z/ && ($1 ne '-' || $2 == 0) && $2 <= 600000;
        $c{wait_ms} = $2 + 0;
    }
    $c{group} = $env->('TOKENLOCK_COUNTER_GROUP');
    # Counting under a lock other than the one counter.cgi takes would let
    # the two lose each other's hits: a lock placed elsewhere is refused.
    for my $v (qw(TOKENLOCK_COUNTER_LOCK TOKENLOCK_COUNTER_REDIS TOKENLOCK_COUNTER_ETCD)) {
        return (undef, "$v is set, but $NAME locks through lock directories beside the counters "
              . 'only (use counter.cgi, or unset it)') if length($env->($v) // '');
    }
    if (defined(my $s = $env->('TOKENLOCK_COUNTER_SYNC'))) {
        return (undef, 'TOKENLOCK_COUNTER_SYNC must be none, file or file_and_dir, not "' . shown($s) . '"')
          unless $s eq 'none' || $s eq 'file' || $s eq 'file_and_dir';
        $c{sync} = $s;
    }
    return (\%c);
}

# One component: '+' is a space, '%' takes two hex digits, NUL is refused
# (raw or encoded). undef when invalid.
sub percent_decode {
    my ($s) = @_;
    return undef if $s =~ /\0/ || $s =~ /%(?![0-9A-Fa-f]{2})/;
    $s =~ tr/+/ /;
    $s =~ s/%([0-9A-Fa-f]{2})/chr hex $1/ge;
    return $s =~ /\0/ ? undef : $s;
}

# Strict on purpose, as counter.cgi: the id becomes part of a file name, so
# anything unexpected is refused with a reason rather than guessed at.
sub parse_query {
    my ($query) = @_;
    return (undef, 'query string too long') if length $query > $MAX_QUERY;
    my %out;
    for my $piece (split /&/, $query, -1) {
        next if $piece eq '';
        my ($raw_name, $raw_value) = split /=/, $piece, 2;
        my $name  = percent_decode($raw_name);
        my $value = defined $raw_value ? percent_decode($raw_value) : '';
        return (undef, 'invalid percent-encoding') unless defined $name && defined $value;
        return (undef, 'parameter without a name') if $name eq '';
        return (undef, 'parameter too long') if length $name > $MAX_NAME || length $value > $MAX_VALUE;
        return (undef, 'repeated parameter') if exists $out{$name};
        return (undef, 'too many parameters') if keys %out == $MAX_PARAMS;
        $out{$name} = $value;
    }
    return (\%out);
}

sub svg {
    my ($value) = @_;
    # Zero-padded to six digits so that the image keeps its size as the
    # count grows, until it has more digits.
    my $digits = length $value < 6 ? ('0' x (6 - length $value)) . $value : $value;
    my $w      = 12 + 11 * length $digits;
    my $mid    = int($w / 2);
    return qq{<?xml version="1.0" encoding="UTF-8"?>\n}
      . qq{<svg xmlns="http://www.w3.org/2000/svg" width="$w" height="24" viewBox="0 0 $w 24" role="img" aria-label="$value hits">\n}
      . qq{<title>$value hits</title>\n}
      . qq{<rect width="$w" height="24" rx="3" fill="#1d1f21"/>\n}
      . qq{<text x="$mid" y="17" fill="#b5f566" font-size="16" }
      . qq{font-family="DejaVu Sans Mono, Menlo, Consolas, monospace" text-anchor="middle" }
      . qq{letter-spacing="1">$digits</text>\n}
      . qq{</svg>\n};
}

sub value_response {
    my ($id, $format, $value) = @_;
    return { status => 200, type => 'application/json', body => qq({"id":"$id","count":$value}\n) }
      if $format eq 'json';
    return { status => 200, type => 'image/svg+xml', body => svg($value) } if $format eq 'svg';
    return { status => 200, type => 'text/plain; charset=utf-8', body => "$value\n" };
}

sub handle {
    my ($method, $query, $cfg) = @_;
    return text(405, 'only GET and HEAD are allowed', [Allow => 'GET, HEAD'])
      unless $method eq 'GET' || $method eq 'HEAD';
    my ($q, $reason) = parse_query($query);
    return text(400, $reason) unless $q;
    for my $name (sort keys %$q) {
        return text(400, 'unknown parameter ' . shown($name)) unless $name eq 'id' || $name eq 'format' || $name eq 'peek';
    }
    my $id = exists $q->{id} ? $q->{id} : 'default';
    return text(400, "id must be 1 to 64 letters, digits, '_' or '-'") unless $id =~ /\A[A-Za-z0-9_-]{1,64}\z/;
    my $format = exists $q->{format} ? $q->{format} : 'text';
    return text(400, 'format must be text, json or svg') unless $format =~ /\A(?:text|json|svg)\z/;
    my $peek = exists $q->{peek} ? $q->{peek} : '0';
    return text(400, 'peek must be 0 or 1') unless $peek eq '0' || $peek eq '1';

    my $file = "$cfg->{dir}/$id.count";
    my $value = eval {
        # A look needs no lock: the counter is replaced by rename, so a read
        # sees one version or the next.
        return Tokenlock::read_counter($file) || 0 if $peek eq '1' || $method eq 'HEAD';
        Tokenlock::increment($file, sync => $cfg->{sync}, wait => $cfg->{wait_ms} / 1000,
            (defined $cfg->{group} ? (group => $cfg->{group}) : ()));
    };
    return value_response($id, $format, $value) if defined $value;

    my $err = $@;
    my $code = ref $err && $err->isa('Tokenlock::Error') ? $err->code : 'perl';
    log_line(ref $err ? $err->message : "$err");
    # stale_data: a network client's cache served an old version and did
    # not let go in time; nothing was written, and a retry will likely
    # succeed.
    return text(503, 'the counter is busy; try again', [ 'Retry-After' => '1' ])
      if $code eq 'busy' || $code eq 'timed_out' || $code eq 'stale_data';
    # An overflow is no corruption of the file: it is a system error
    # (EOVERFLOW), an internal error below.
    return text(500, 'the counter file is corrupt; it was left as it is') if $code eq 'corrupt_data';
    return text(500, "the counter is misconfigured; see the server's error log")
      if $code eq 'no_command' || $code eq 'bad_argument';
    # The hit is counted; only its durability is in doubt.
    return value_response($id, $format, $err->value) if $code eq 'dir_sync_failed' && defined $err->value;
    return text(500, "internal error; see the server's error log");
}

sub main {
    drain_request_body();
    my $method = defined $ENV{REQUEST_METHOD} ? $ENV{REQUEST_METHOD} : '';
    my $head   = $method eq 'HEAD';
    # Loaded here rather than with `use`, so that a missing module is a
    # response and a line in the log instead of a bare server error.
    my ($cfg, $error) = eval { require Tokenlock; 1 }
      ? load_config()
      : (undef, 'cannot load Tokenlock.pm (put it and its directory Tokenlock/ beside the script, or both in lib/ '
          . 'beside it): '
          . (split /\n/, $@)[0]);
    if (!$cfg) {
        log_line("misconfigured: $error");
        respond(text(500, "the counter is misconfigured; see the server's error log"), $head);
        return 0;
    }
    respond(handle($method, defined $ENV{QUERY_STRING} ? $ENV{QUERY_STRING} : '', $cfg), $head);
    return 0;
}

exit main();
