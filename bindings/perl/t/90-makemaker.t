#!/usr/bin/perl
# perl Makefile.PL && make && make test && make install, from a clean copy
# of this directory, installing under a scratch INSTALL_BASE; a script then
# counts through the installed module.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use File::Copy ();
use File::Path ();
use Test::More;
use TokenlockTest;

tokenlock_command();
my $src = "$FindBin::Bin/..";
plan(skip_all => 'no make') unless grep { -x "$_/make" } split /:/, $ENV{PATH} || '';

my $top  = scratch_dir();
my $copy = "$top/Tokenlock";
my $inst = "$top/installed";
# The files of the distribution, copied as a clean tree would have them.
for my $f ('Makefile.PL', (map { "lib/$_" } module_files()), 't/lib/TokenlockTest.pm', 't/18-no-process.t') {
    (my $d = "$copy/$f") =~ s{/[^/]*\z}{};
    File::Path::mkpath($d);
    File::Copy::copy("$src/$f", "$copy/$f") or die "copy $f: $!";
}

sub run_in {
    my ($what, @argv) = @_;
    my $pid = fork;
    die "fork: $!" unless defined $pid;
    if (!$pid) {
        chdir $copy or POSIX::_exit(120);
        open STDOUT, '>>', "$top/log" or POSIX::_exit(121);
        open STDERR, '>&', \*STDOUT or POSIX::_exit(122);
        # Only this run's own settings: none from the caller's environment.
        delete @ENV{qw(PERL_MM_OPT PERL_MB_OPT PERL5LIB MAKEFLAGS)};
        { no warnings 'exec'; exec { $argv[0] } @argv; }
        POSIX::_exit(123);
    }
    waitpid($pid, 0);
    is($?, 0, $what) or diag(TokenlockTest::slurp("$top/log"));
    return $? == 0;
}

require POSIX;
run_in('perl Makefile.PL', $^X, 'Makefile.PL', "INSTALL_BASE=$inst") or BAIL_OUT('Makefile.PL failed');
# Never install anywhere but the scratch directory.
like(TokenlockTest::slurp("$copy/Makefile"), qr/^INSTALL_BASE = \Q$inst\E$/m, 'the Makefile installs under the scratch directory')
  or BAIL_OUT('the Makefile would install elsewhere');
run_in('make', 'make');
run_in('make test', 'make', 'test');
run_in('make install', 'make', 'install');
my $pm = "$inst/lib/perl5/Tokenlock.pm";
ok(-f $pm, 'the module is installed');
my @missing = grep { !-f "$inst/lib/perl5/$_" } module_files();
is("@missing", '', 'every part of it too (' . scalar(module_files()) . ' files)');
ok(-f "$inst/man/man3/$_.3pm", "with the manual page of $_") for qw(Tokenlock Tokenlock::Redis Tokenlock::Error);
my ($st, $out, $err) = capture([$^X, "-I$inst/lib/perl5", '-MTokenlock', '-e',
    'print $INC{"Tokenlock.pm"}, " ", Tokenlock::increment($ARGV[0]), "\n"', "$top/c.count"],
    env => { PERL5LIB => undef, PERL5OPT => undef });
is($st, 0, 'a script loads the installed module') or diag($err);
is($out, "$pm 1\n", 'and counts through it');

done_testing();
