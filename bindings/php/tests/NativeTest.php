<?php

declare(strict_types=1);

namespace Tokenlock\Tests;

use Tokenlock\Exception;
use Tokenlock\Lock;
use Tokenlock\Tests\Support\Channel;
use Tokenlock\Tests\Support\Child;
use Tokenlock\Tests\Support\TempDirTestCase;
use Tokenlock\Tests\Support\Tool;

use function Tokenlock\holder;

/**
 * The lock written in PHP against the tokenlock command: each excludes the
 * other, and each takes over what the other left stale, by its exact name.
 */
final class NativeTest extends TempDirTestCase
{
    public function testTheCommandCannotRunWhileThisModuleHoldsTheLockAndCanAfterItsRelease(): void
    {
        $lockDir = "$this->dir/a.lock";
        $lock = Lock::acquire($lockDir);
        [$status, , $err] = Tool::run(['run', '-n', $lockDir, 'true']);
        $this->assertSame(1, $status, $err);
        $this->assertSame('held', Tool::status($lockDir)['state']);
        $this->assertSame($lock->token(), Tool::status($lockDir)['token']);
        $lock->release();
        [$status, , $err] = Tool::run(['run', '-n', $lockDir, 'true']);
        $this->assertSame(0, $status, $err);
        $this->assertLockFree($lockDir);
    }

    public function testThisModuleCannotLockWhileTheCommandHoldsTheLockAndCanAfterItsRelease(): void
    {
        $lockDir = "$this->dir/a.lock";
        [$status, $token, $err] = Tool::run(['acquire', '--pid', (string) getmypid(), $lockDir]);
        $this->assertSame(0, $status, $err);
        $token = trim($token);
        $this->assertNull(Lock::tryAcquire($lockDir));
        $this->assertSame([$token => true], $this->entries($lockDir), 'the held token is untouched');
        [$status, , $err] = Tool::run(['release', $lockDir, $token]);
        $this->assertSame(0, $status, $err);
        $lock = Lock::tryAcquire($lockDir);
        $this->assertNotNull($lock);
        $lock->release();
        $this->assertLockFree($lockDir);
    }

    public function testATokenOfADeadProcessIsTakenOverByItsExactNameAndItsWorkspaceClearedWithoutFollowingLinks(): void
    {
        $lockDir = "$this->dir/a.lock";
        $child = Child::start(function (Channel $ch): void {
            $ch->send('ready');
            $ch->receive();  // never comes: killed
        });
        $this->assertSame('ready', $child->channel->receive());
        [$status, $token, $err] = Tool::run(['acquire', '--pid', (string) $child->pid, $lockDir]);
        $this->assertSame(0, $status, $err);
        $token = trim($token);
        // What the dead owner left in its workspace, and a link out of it.
        file_put_contents("$this->dir/outside", "keep\n");
        mkdir("$lockDir/$token/w");
        file_put_contents("$lockDir/$token/w/.x.tmp.0123456789abcdef", 'partial');
        symlink("$this->dir/outside", "$lockDir/$token/link");
        symlink($this->dir, "$lockDir/$token/dirlink");
        $this->assertSame(128 + SIGKILL, $child->kill());

        $lock = Lock::tryAcquire($lockDir);
        $this->assertNotNull($lock, 'the dead owner\'s token is taken over at once');
        $this->assertSame([$lock->token() => true], $this->entries($lockDir), 'the exact name was renamed: one token, ours');
        $this->assertSame([], array_values(array_diff(scandir("$lockDir/" . $lock->token()), ['.', '..'])), 'the workspace was cleared');
        $this->assertSame("keep\n", file_get_contents("$this->dir/outside"), 'a link in the workspace was not followed');
        $this->assertFileExists("$this->dir/outside");
        $lock->release();
        $this->assertLockFree($lockDir);
    }

    public function testTheCommandTakesOverTheLockOfAKilledHolderOfThisModuleAtOnce(): void
    {
        $lockDir = "$this->dir/a.lock";
        $child = Child::start(function (Channel $ch) use ($lockDir): void {
            $lock = Lock::acquire($lockDir);
            $ch->send($lock->token());
            $ch->receive();  // never comes: killed
        });
        $token = $child->channel->receive();
        [$status, , $err] = Tool::run(['run', '-n', $lockDir, 'true']);
        $this->assertSame(1, $status, 'held by a live holder: ' . $err);
        $this->assertSame([$token => true], $this->entries($lockDir));
        $this->assertSame(128 + SIGKILL, $child->kill());
        // Same host tag and start time as the library's: it sees the owner dead.
        [$status, , $err] = Tool::run(['run', '-n', $lockDir, 'true']);
        $this->assertSame(0, $status, $err);
        $this->assertLockFree($lockDir);
        $this->assertSame(['lockfile' => true], $this->entries($lockDir));
    }

    public function testATokenWhosePidNowBelongsToAnotherProcessIsTakenOverAndOneOfItsLiveOwnerIsNot(): void
    {
        $lockDir = "$this->dir/a.lock";
        $probe = Lock::acquire($lockDir);
        // lockfile.EXPIRY.TAG.PID.START.NONCE: this process, as the module names it.
        [, , $tag, $pid, $start] = explode('.', $probe->token());
        $probe->release();
        $expiry = (time() + 600) * 1000000;
        $reused = "lockfile.$expiry.$tag.$pid." . ((int) $start + 1) . '.0123456789abcdef';
        rename("$lockDir/lockfile", "$lockDir/$reused");
        $this->assertTrue(Tool::status($lockDir)['stale'], 'the library agrees the owner is gone');
        $lock = Lock::tryAcquire($lockDir);
        $this->assertNotNull($lock, 'the pid was reused: the owner is gone');
        $this->assertSame([$lock->token() => true], $this->entries($lockDir));
        $lock->release();

        $live = "lockfile.$expiry.$tag.$pid.$start.0123456789abcdef";
        rename("$lockDir/lockfile", "$lockDir/$live");
        $this->assertNull(Lock::tryAcquire($lockDir), 'its owner, this process, lives');
        $this->assertSame([$live => true], $this->entries($lockDir));
        rename("$lockDir/$live", "$lockDir/lockfile");
    }

    public function testAnExpiredLeaseOfAnotherHostIsTakenOverAndALiveOneIsNot(): void
    {
        $lockDir = "$this->dir/a.lock";
        Lock::acquire($lockDir)->release();
        $expired = 'lockfile.1000000.elsewhere-0123abcd.42.7.0123456789abcdef';
        rename("$lockDir/lockfile", "$lockDir/$expired");
        $lock = Lock::tryAcquire($lockDir);
        $this->assertNotNull($lock);
        $this->assertSame([$lock->token() => true], $this->entries($lockDir));
        $lock->release();

        $live = 'lockfile.' . ((time() + 600) * 1000000) . '.elsewhere-0123abcd.42.7.0123456789abcdef';
        rename("$lockDir/lockfile", "$lockDir/$live");
        $this->assertNull(Lock::tryAcquire($lockDir), 'a token of another host is judged by its lease only');
        $this->assertSame('held', Tool::status($lockDir)['state']);
        $this->assertSame([$live => true], $this->entries($lockDir));
    }

    public function testALegacyTokenIsHeldUntilItsTimeoutAndThenTakenOver(): void
    {
        $lockDir = "$this->dir/a.lock";
        Lock::acquire($lockDir)->release();
        $fresh = 'lockfile' . time();
        rename("$lockDir/lockfile", "$lockDir/$fresh");
        $this->assertNull(Lock::tryAcquire($lockDir));
        $this->assertSame([$fresh => true], $this->entries($lockDir));
        $old = 'lockfile' . (time() - 120);
        rename("$lockDir/$fresh", "$lockDir/$old");
        $lock = Lock::tryAcquire($lockDir);
        $this->assertNotNull($lock);
        $this->assertSame([$lock->token() => true], $this->entries($lockDir));
        $lock->release();
        $this->assertLockFree($lockDir);
    }

    public function testAMalformedTokenIsLockCorruptAndLeftAlone(): void
    {
        $lockDir = "$this->dir/a.lock";
        mkdir($lockDir);
        $odd = 'lockfile.1000000.h-0000abcd.01.7.0123456789abcdef';
        mkdir("$lockDir/$odd");
        try {
            Lock::acquire($lockDir, ['wait' => 0]);
            $this->fail('acquired beside a malformed token');
        } catch (Exception $e) {
            $this->assertSame('lock_corrupt', $e->getError());
            $this->assertSame(69, $e->getCode());
            $this->assertStringContainsString($odd, $e->getMessage());
        }
        $this->assertSame([$odd => true], $this->entries($lockDir));
    }

    public function testASymlinkedLockDirectoryIsRefusedAsUntrustedAndNothingIsTouched(): void
    {
        mkdir("$this->dir/real");
        mkdir("$this->dir/real/lockfile");
        symlink("$this->dir/real", "$this->dir/a.lock");
        try {
            Lock::acquire("$this->dir/a.lock", ['wait' => 0]);
            $this->fail('acquired through a symbolic link');
        } catch (Exception $e) {
            $this->assertSame('untrusted', $e->getError());
            $this->assertSame(77, $e->getCode());
            $this->assertStringContainsString("$this->dir/a.lock", $e->getMessage());
        }
        $this->assertSame(['lockfile' => true], $this->entries("$this->dir/real"));
    }

    public function testTheLockWorksWithEveryWayToStartAProcessDisabledAndNoCommand(): void
    {
        $lockDir = "$this->dir/a.lock";
        $script = $this->script($lockDir, <<<'PHP'
            $lock = Tokenlock\Lock::acquire($lockDir, ['wait' => 0]);
            echo $lock->token(), "\n";
            $lock->refresh(60);
            echo $lock->token(), "\n";
            fgets(STDIN);
            $lock->release();
            echo "released\n";
            PHP);
        $proc = proc_open([PHP_BINARY, '-n', '-d', 'disable_functions=proc_open,popen,exec,shell_exec,system,passthru,pcntl_exec', $script],
            [0 => ['pipe', 'r'], 1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes, null,
            ['TOKENLOCK_COMMAND' => "$this->dir/no-such-tokenlock", 'PATH' => '/nonexistent']);
        $first = trim((string) fgets($pipes[1]));
        $second = trim((string) fgets($pipes[1]));
        $this->assertMatchesRegularExpression('/\Alockfile\.[0-9]+\./', $first);
        $this->assertNotSame($first, $second);
        $this->assertSame($second, Tool::status($lockDir)['token'], 'the command sees the lock held');
        [$status] = Tool::run(['run', '-n', $lockDir, 'true']);
        $this->assertSame(1, $status);
        fwrite($pipes[0], "go\n");
        fclose($pipes[0]);
        $this->assertSame("released\n", stream_get_contents($pipes[1]));
        $this->assertSame('', stream_get_contents($pipes[2]));
        fclose($pipes[1]);
        fclose($pipes[2]);
        $this->assertSame(0, proc_close($proc));
        $this->assertLockFree($lockDir);
    }

    public function testWithoutProcADeadOwnerWaitsForItsLeaseAndThisIsSaidOnce(): void
    {
        $lockDir = "$this->dir/a.lock";
        $child = Child::start(function (Channel $ch): void {
            $ch->send('ready');
            $ch->receive();  // never comes: killed
        });
        $this->assertSame('ready', $child->channel->receive());
        [$status, $token, $err] = Tool::run(['acquire', '--pid', (string) $child->pid, $lockDir]);
        $this->assertSame(0, $status, $err);
        $token = trim($token);
        $this->assertSame(128 + SIGKILL, $child->kill());
        $script = $this->script($lockDir, <<<'PHP'
            var_dump(Tokenlock\Lock::tryAcquire($lockDir));
            var_dump(Tokenlock\Lock::tryAcquire($lockDir));
            PHP);
        $src = dirname(TOKENLOCK_TEST_MODULE);
        [$code, $out] = $this->runPhp(['-d', "open_basedir=$this->dir:$src", '-d', 'display_errors=stderr', '-d', 'error_reporting=-1', $script]);
        $this->assertSame(0, $code, $out[1]);
        $this->assertSame("NULL\nNULL\n", $out[0]);
        $this->assertSame(1, substr_count($out[1], '/proc cannot be read'), $out[1]);
        $this->assertStringContainsString('open_basedir', $out[1]);
        $this->assertSame([$token => true], $this->entries($lockDir), 'judged by its lease: left alone');
    }

    public function testHolderDescribesTheLockAsTheCommandsStatusDoesAndChangesNothing(): void
    {
        $lockDir = "$this->dir/a.lock";
        $this->assertNull(holder($lockDir), 'a lock not created yet has no holder');
        $this->assertFileDoesNotExist($lockDir);
        [$status, $token, $err] = Tool::run(['acquire', '--pid', (string) getmypid(), $lockDir]);
        $this->assertSame(0, $status, $err);
        $token = trim($token);
        $h = holder($lockDir);
        $s = Tool::status($lockDir);
        $this->assertSame($s['token'], $h['token']);
        $this->assertSame($s['pid'], $h['pid']);
        $this->assertSame($s['host_tag'], $h['host_tag']);
        $this->assertSame($s['same_host'], $h['same_host']);
        $this->assertSame($s['expires_us'], $h['expires_us']);
        $this->assertSame($s['stale'], $h['stale']);
        $this->assertSame($s['legacy'], $h['legacy']);
        $this->assertSame($s['reason'], $h['reason']);
        $this->assertSame([$token => true], $this->entries($lockDir));
        [$status, , $err] = Tool::run(['release', $lockDir, $token]);
        $this->assertSame(0, $status, $err);
        $this->assertNull(holder($lockDir));

        $old = 'lockfile' . (time() - 120);
        rename("$lockDir/lockfile", "$lockDir/$old");
        $h = holder($lockDir);
        $this->assertTrue($h['legacy']);
        $this->assertTrue($h['stale']);
        $this->assertSame(Tool::status($lockDir)['stale'], $h['stale']);
        $this->assertSame([$old => true], $this->entries($lockDir), 'looking took nothing over');
    }

    public function testProcessesThatAllFindNoLockDirectoryCreateExactlyOneTokenAndLeaveNoTemporaryDirectory(): void
    {
        $lockDir = "$this->dir/a.lock";
        $children = [];
        for ($i = 0; $i < 6; ++$i) {
            $children[] = Child::start(function (Channel $ch) use ($lockDir): void {
                $ch->receive();  // go
                for ($n = 0; $n < 20; ++$n) {
                    Lock::acquire($lockDir, ['wait' => 60])->release();
                }
                $ch->send('done');
            });
        }
        $this->assertFileDoesNotExist($lockDir);
        foreach ($children as $child) {
            $child->channel->send('go');
        }
        foreach ($children as $child) {
            $this->assertSame('done', $child->channel->receive());
            $this->assertSame(0, $child->wait());
        }
        // Contended waiters line up in D/turnstile: left empty, for no one else.
        $entries = $this->entries($lockDir);
        if (isset($entries['turnstile'])) {
            clearstatcache();
            $this->assertSame(0, filesize("$lockDir/turnstile"), 'no hungry mark is left');
            $this->assertSame(0600, fileperms("$lockDir/turnstile") & 07777);
            unset($entries['turnstile']);
        }
        $this->assertSame(['lockfile' => true], $entries);
        $this->assertSame(['a.lock' => true], $this->entries($this->dir), 'no creation directory is left');
    }

    public function testCreationLeftoversOfDeadOrExpiredCreatorsAreSweptAndOthersLeftAlone(): void
    {
        $lockDir = "$this->dir/a.lock";
        $expired = 'a.lock.init.1000000.elsewhere-0123abcd.42.7.0123456789abcdef';
        $live = 'a.lock.init.' . ((time() + 600) * 1000000) . '.elsewhere-0123abcd.42.7.0123456789abcdef';
        mkdir("$this->dir/$expired/lockfile", 0755, true);
        mkdir("$this->dir/$live/lockfile", 0755, true);
        $planted = 'a.lock.init.1000000.elsewhere-0123abcd.43.7.0123456789abcdef';
        mkdir("$this->dir/target");
        symlink("$this->dir/target", "$this->dir/$planted");
        $lock = Lock::acquire($lockDir);
        $lock->release();
        $expected = ['a.lock' => true, $live => true, $planted => false, 'target' => true];
        ksort($expected);
        $this->assertSame($expected, $this->entries($this->dir), 'only the expired leftover was removed');
        $this->assertDirectoryExists("$this->dir/target");
        $this->assertSame(['lockfile' => true], $this->entries($lockDir));
    }

    public function testReleaseAndRefreshThatCannotRenameFailWithTheCauseAndKeepTheLockHeld(): void
    {
        if (posix_geteuid() !== 0 || !is_executable('/usr/bin/setpriv')) {
            $this->markTestSkipped('needs root, to run the script as user nobody, and setpriv');
        }
        // Root may rename anywhere: the script runs as nobody, in a
        // directory of its own that the test can make read-only.
        chmod($this->dir, 0755);
        $home = "$this->dir/nobody";
        mkdir($home);
        chown($home, 65534);
        $lockDir = "$home/a.lock";
        $script = $this->script($lockDir, <<<'PHP'
            $lock = Tokenlock\Lock::acquire($lockDir, ['wait' => 0]);
            echo $lock->token(), "\n";
            fgets(STDIN);  // the lock directory is read-only now
            foreach (['refresh', 'release'] as $step) {
                try {
                    $step === 'refresh' ? $lock->refresh(60) : $lock->release();
                    echo "$step: done\n";
                } catch (Tokenlock\Exception $e) {
                    echo "$step: ", $e->getError(), ' ', $e->getErrno(), ' ', $e->getCode(), ' ', ($lock->isHeld() ? 'held' : 'not held'), ' ', $lock->token(), ' | ', $e->getMessage(), "\n";
                }
            }
            fgets(STDIN);  // writable again
            $lock->release();
            echo "released\n";
            PHP);
        chmod($script, 0644);
        $proc = proc_open(['/usr/bin/setpriv', '--reuid=65534', '--regid=65534', '--clear-groups', PHP_BINARY, '-n', $script],
            [0 => ['pipe', 'r'], 1 => ['pipe', 'w'], 2 => ['file', '/dev/null', 'w']], $pipes);
        $token = trim((string) fgets($pipes[1]));
        $this->assertMatchesRegularExpression('/\Alockfile\.[0-9]+\./', $token);
        chmod($lockDir, 0555);
        fwrite($pipes[0], "go\n");
        $refresh = trim((string) fgets($pipes[1]));
        $release = trim((string) fgets($pipes[1]));
        $this->assertStringStartsWith("refresh: system 13 77 held $token | tokenlock: refresh $lockDir: ", $refresh);
        $this->assertStringContainsString('Permission denied', $refresh);
        $this->assertStringStartsWith("release: system 13 77 held $token | tokenlock: release $lockDir: ", $release);
        $this->assertSame([$token => true], $this->entries($lockDir), 'the token is where it was');
        chmod($lockDir, 0755);
        fwrite($pipes[0], "go\n");
        fclose($pipes[0]);
        $this->assertSame("released\n", stream_get_contents($pipes[1]));
        fclose($pipes[1]);
        $this->assertSame(0, proc_close($proc));
        $this->assertSame(['lockfile' => true], $this->entries($lockDir));
    }

    public function testALockDirectoryThatCannotBeCreatedFailsWithTheCauseAndLeavesNothing(): void
    {
        if (posix_geteuid() !== 0 || !is_executable('/usr/bin/setpriv')) {
            $this->markTestSkipped('needs root, to run the script as user nobody, and setpriv');
        }
        chmod($this->dir, 0755);
        mkdir("$this->dir/closed", 0755);  // root's: nobody cannot create in it
        $lockDir = "$this->dir/closed/a.lock";
        $script = $this->script($lockDir, <<<'PHP'
            try {
                Tokenlock\Lock::acquire($lockDir, ['wait' => 0]);
                echo "acquired\n";
            } catch (Tokenlock\Exception $e) {
                echo $e->getError(), ' ', $e->getErrno(), ' ', $e->getCode(), ' | ', $e->getMessage(), "\n";
            }
            PHP);
        chmod($script, 0644);
        $proc = proc_open(['/usr/bin/setpriv', '--reuid=65534', '--regid=65534', '--clear-groups', PHP_BINARY, '-n', $script],
            [0 => ['file', '/dev/null', 'r'], 1 => ['pipe', 'w'], 2 => ['file', '/dev/null', 'w']], $pipes);
        $out = trim((string) stream_get_contents($pipes[1]));
        fclose($pipes[1]);
        $this->assertSame(0, proc_close($proc));
        $this->assertStringStartsWith("system 13 77 | tokenlock: create $lockDir: cannot create the temporary directory $this->dir/closed/a.lock.init.", $out);
        $this->assertStringContainsString('Permission denied', $out);
        $this->assertSame([], $this->entries("$this->dir/closed"), 'nothing was created');
    }

    /** A script that loads the module and runs BODY with $lockDir set. */
    private function script(string $lockDir, string $body): string
    {
        $path = "$this->dir/script.php";
        $module = TOKENLOCK_TEST_MODULE;
        file_put_contents($path, "<?php\nrequire " . var_export($module, true) . ";\n\$lockDir = " . var_export($lockDir, true) . ";\n$body\n");
        return $path;
    }

    /**
     * @param list<string> $args
     * @return array{0: int, 1: array{0: string, 1: string}}
     */
    private function runPhp(array $args): array
    {
        $proc = proc_open(array_merge([PHP_BINARY, '-n'], $args), [0 => ['file', '/dev/null', 'r'], 1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes);
        $out = (string) stream_get_contents($pipes[1]);
        $err = (string) stream_get_contents($pipes[2]);
        fclose($pipes[1]);
        fclose($pipes[2]);
        return [proc_close($proc), [$out, $err]];
    }

    public function testGroupSharingIsChosenAsTheCommandChoosesIt(): void
    {
        $lockDir = "$this->dir/g.lock";
        putenv('TOKENLOCK_DIR_MODE=0775');
        try {
            $lock = Lock::acquire($lockDir);
            clearstatcache();
            $this->assertSame('0775', sprintf('%04o', fileperms($lockDir) & 07777), 'the lock directory is made 0775');
            $lock->release();
            $again = Lock::tryAcquire($lockDir);
            $this->assertNotNull($again, 'a group-writable lock directory of our group is used');
            $again->release();
            $this->assertSame(1, \Tokenlock\increment("$this->dir/g.count", ['lock' => $lockDir]));
            clearstatcache();
            $this->assertSame('0775', sprintf('%04o', fileperms("$lockDir/lockfile/w") & 07777), 'and so is the workspace');
        } finally {
            putenv('TOKENLOCK_DIR_MODE');
        }
        try {
            Lock::acquire($lockDir, ['wait' => 0]);
            $this->fail('a group-writable lock directory was used without group sharing');
        } catch (Exception $e) {
            $this->assertSame('untrusted', $e->getError());
            $this->assertStringContainsString('which is not the group chosen for sharing', $e->getMessage());
        }
        $this->assertSame(['lockfile' => true], $this->entries($lockDir), 'nothing in it was touched');
        foreach (['0777', '0600', 'rwx', '01775'] as $bad) {
            putenv("TOKENLOCK_DIR_MODE=$bad");
            try {
                Lock::acquire("$this->dir/m.lock", ['wait' => 0]);
                $this->fail("TOKENLOCK_DIR_MODE=$bad was accepted");
            } catch (Exception $e) {
                $this->assertSame('bad_argument', $e->getError(), $bad);
                $this->assertStringContainsString("TOKENLOCK_DIR_MODE", $e->getMessage());
            } finally {
                putenv('TOKENLOCK_DIR_MODE');
            }
            $this->assertSame([], preg_grep('/^m\.lock/', scandir($this->dir)), 'nothing was made, not even a creation directory');
        }
    }

    public function testAStickyLockDirectoryNamesTheTokensOwnerWhenItsRenameIsRefused(): void
    {
        if (posix_geteuid() !== 0) {
            $this->markTestSkipped('a token of another user is made as root');
        }
        $lockDir = "$this->dir/s.lock";
        Lock::acquire($lockDir)->release();
        chmod($this->dir, 0755);
        chgrp($lockDir, 65534);
        chmod($lockDir, 01775);
        $child = Child::start(function (Channel $ch) use ($lockDir): void {
            if (!posix_setgid(65534) || !posix_setuid(65534)) {
                throw new \RuntimeException('cannot become user nobody');
            }
            // The group named: the directory is trusted, and the sticky
            // bit refuses the rename.
            putenv('TOKENLOCK_GROUP=65534');
            try {
                Lock::acquire($lockDir, ['wait' => 0]);
                $ch->send('acquired');
            } catch (Exception $e) {
                $ch->send($e->getError() . ' ' . $e->getErrno() . ' ' . $e->getMessage());
            }
        });
        $answer = $child->channel->receive();
        $this->assertStringStartsWith("system 1 tokenlock: acquire $lockDir: cannot rename the free token lockfile to lockfile.", $answer);
        $this->assertStringContainsString("lock directory $lockDir is sticky and the token belongs to uid 0 (we are uid 65534)", $answer);
        $this->assertSame(0, $child->wait());
        $this->assertSame(['lockfile' => true], $this->entries($lockDir), 'nothing was changed');
    }

    public function testAForkedChildCannotReleaseOrRefreshItsParentsLock(): void
    {
        if (!function_exists('pcntl_fork')) {
            $this->markTestSkipped('forking needs the pcntl extension of the PHP CLI');
        }
        $lockDir = "$this->dir/a.lock";
        $lock = Lock::acquire($lockDir);
        $token = $lock->token();
        $child = Child::start(function (Channel $ch) use ($lock): void {
            foreach (['release' => fn () => $lock->release(), 'refresh' => fn () => $lock->refresh(60)] as $step => $call) {
                try {
                    $call();
                    $ch->send("$step: done");
                } catch (Exception $e) {
                    $ch->send("$step: " . $e->getError() . ' ' . $e->getCode() . ' ' . $e->getMessage());
                }
            }
        });
        $parent = getmypid();
        foreach (['release', 'refresh'] as $step) {
            $answer = $child->channel->receive();
            $this->assertStringStartsWith("$step: not_owner 70 tokenlock: $step $lockDir: the lock belongs to process $parent, and this is its forked child $child->pid", $answer);
        }
        $this->assertSame(0, $child->wait(), 'the child ended, its copy of the lock destroyed without a release');
        $this->assertSame([$token => true], $this->entries($lockDir), 'the lock is still held, under the same token');
        $this->assertTrue($lock->isHeld());
        $this->assertSame($token, Tool::status($lockDir)['token']);
        $lock->release();
        $this->assertLockFree($lockDir);
    }

    /** @return array<string, bool> the entries of DIR, each with whether it is a directory */
    private function entries(string $dir): array
    {
        clearstatcache();
        $out = [];
        foreach (array_diff(scandir($dir), ['.', '..']) as $n) {
            $out[$n] = is_dir("$dir/$n") && !is_link("$dir/$n");
        }
        ksort($out);
        return $out;
    }
}
