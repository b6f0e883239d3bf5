#!/usr/bin/perl
# The module as files: Tokenlock.pm and its parts in Tokenlock/. use
# Tokenlock compiles the parts every call needs, not Tokenlock::Command and
# Tokenlock::Redis, which their first call compiles from where Tokenlock.pm
# is, also after the program changed directories with the module on a
# relative @INC entry. A Tokenlock.pm copied without its directory says
# what to copy.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";
use Cwd ();
use Test::More;
use TokenlockTest;

my $lib  = Cwd::abs_path("$FindBin::Bin/../lib");
my $top  = scratch_dir();
my %bare = (PERL5LIB => undef, PERL5OPT => undef);

# Runs perl code with the module found through the relative @INC entry
# 'lib', from the directory above it; prints what the code prints.
sub in_lib_parent {
    my ($code, @args) = @_;
    (my $parent = $lib) =~ s{/lib\z}{};
    return capture([$^X, '-e', 'chdir shift @ARGV or die "chdir: $!"; unshift @INC, "lib"; require Tokenlock; ' . $code,
        $parent, @args], env => \%bare);
}

{
    my ($st, $out, $err) = in_lib_parent('print join(" ", sort grep { m{\ATokenlock/} } keys %INC), "\n"');
    is($st, 0, 'use Tokenlock') or diag($err);
    unlike($out, qr{Tokenlock/(?:Command|Redis)\.pm}, 'compiles neither Tokenlock::Command nor Tokenlock::Redis');
    like($out, qr{Tokenlock/Lock\.pm}, 'but the parts a lock needs');
}

{
    my ($st, $out, $err) = in_lib_parent(
        'chdir "/" or die; eval { Tokenlock::command_path(command => "/nonexistent/tokenlock") }; '
          . 'print ref $@ ? $@->code : "died: $@", " ", $INC{"Tokenlock/Command.pm"}, "\n"; '
          . 'eval { Tokenlock::Redis->acquire("", "x") }; '
          . 'print ref $@ ? $@->code : "died: $@", " ", $INC{"Tokenlock/Redis.pm"}, "\n"');
    is($st, 0, 'after a chdir away from the relative @INC entry') or diag($err);
    is($out, "no_command $lib/Tokenlock/Command.pm\nbad_argument $lib/Tokenlock/Redis.pm\n",
        'the first call compiles Tokenlock::Command, and Tokenlock::Redis, from where Tokenlock.pm is');
}

{
    my $alone = "$top/alone";
    mkdir $alone or die "mkdir $alone: $!";
    TokenlockTest::spit("$alone/Tokenlock.pm", TokenlockTest::slurp("$lib/Tokenlock.pm"));
    my ($st, $out, $err) = capture([$^X, "-I$alone", '-e', 'use Tokenlock; print "loaded\n"'], env => \%bare);
    isnt($st, 0, 'Tokenlock.pm without its directory Tokenlock/ does not load');
    is($out, '', 'and nothing runs');
    like($err, qr{\ATokenlock: loading Tokenlock\.pm: cannot find its part Tokenlock/Error\.pm: .*\Q($alone/Tokenlock/ here)\E; copy both}s,
        'the error names the part missing, the directory to copy and where it belongs');
}

done_testing();
